package virtio9p

import (
	"encoding/binary"
	"io"
	"sync"
)

// 9P framing: size[4] type[1] tag[2], then the body.
const (
	headerLen       = 7
	rlerrorLen      = headerLen + 4 // Rlerror: ecode[4]
	msgRlerror      = 7
	msgTxattrcreate = 32
	msgTversion     = 100
	msgTflush       = 108
	msgRflush       = 109
	msgRversion     = 101
)

// conn is the byte stream between the device and one p9 server session:
// the server reads requests from it and writes replies to it.
//
// The server writes each reply in several pieces (header, fixed fields,
// payload), never interleaving two (it holds its send lock for a whole
// message). Write follows that framing itself: each message goes whole to
// the chain that was waiting when its header arrived, or nowhere, and that
// chain is done only once the message's last byte is in. So a reply too
// big for its chain is consumed to its end before the next chain is
// served, and its tail can never be read as the next reply's header.
type conn struct {
	reqs      chan []byte
	closed    chan struct{}
	closeOnce sync.Once

	// pending is the rest of the request being read. Only the server's
	// receiving goroutine touches it (the server serialises receives).
	pending []byte

	mu    sync.Mutex
	next  *reply // the chain waiting for the next reply; nil drops it
	cur   *reply // the chain the message in progress goes to; nil drops it
	hdr   [headerLen]byte
	nhdr  int // header bytes of the next message received so far
	left  int // bytes of the message in progress still to come
	inMsg bool
}

func newConn() *conn {
	return &conn{reqs: make(chan []byte), closed: make(chan struct{})}
}

// Read implements io.Reader for the server: the bytes of one request at a
// time, as the device hands them over.
func (c *conn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		select {
		case b := <-c.reqs:
			c.pending = b
		case <-c.closed:
			return 0, io.EOF
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write implements io.Writer for the server: reply bytes, in as many
// pieces as it likes.
func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		if !c.inMsg {
			k := copy(c.hdr[c.nhdr:], p)
			c.nhdr += k
			p = p[k:]
			if c.nhdr < headerLen {
				break
			}
			c.nhdr = 0
			// p9 always frames its messages: size counts the header.
			// Should it not, the message is taken as the header alone.
			size := max(int(binary.LittleEndian.Uint32(c.hdr[:])), headerLen)
			c.cur, c.next = c.next, nil
			c.left, c.inMsg = size-headerLen, true
			if c.cur != nil {
				c.cur.begin(c.hdr, size)
			}
		} else {
			k := min(len(p), c.left)
			if c.cur != nil {
				c.cur.body(p[:k])
			}
			c.left -= k
			p = p[k:]
		}
		if c.inMsg && c.left == 0 {
			if c.cur != nil {
				close(c.cur.done)
			}
			c.cur, c.inMsg = nil, false
		}
	}
	return n, nil
}

// expect names the chain the next reply goes into.
func (c *conn) expect(r *reply) {
	c.mu.Lock()
	c.next = r
	c.mu.Unlock()
}

// Close ends the session: the server's next Read sees EOF, and no reply
// reaches guest memory any more. Safe to call more than once (the server
// closes both of its ends).
func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	c.next, c.cur = nil, nil
	c.mu.Unlock()
	return nil
}

// reply streams one 9P reply into a chain's writable buffers.
type reply struct {
	bufs     [][]byte // the chain's writable buffers, in guest memory
	capacity int
	tag      uint16 // the request's tag, put on the reply whatever the server said
	done     chan struct{}

	head     [rlerrorLen]byte // the first bytes: header, and Rversion's msize or Rlerror's code
	got      int              // reply bytes received
	written  int              // bytes put into guest memory
	overflow bool             // the reply does not fit in the chain: dropped
}

// begin takes the reply's header; size is its size field.
func (r *reply) begin(hdr [headerLen]byte, size int) {
	copy(r.head[:], hdr[:])
	binary.LittleEndian.PutUint16(r.head[5:], r.tag) // the server sends no tag for a request it could not decode
	r.got = headerLen
	if size > r.capacity {
		r.overflow = true
		return
	}
	r.put(r.head[:headerLen])
}

// body takes the next bytes of the reply after its header.
func (r *reply) body(p []byte) {
	if r.got < rlerrorLen {
		copy(r.head[r.got:], p)
	}
	r.got += len(p)
	if !r.overflow {
		r.put(p)
	}
}

// put appends b to what is written into the guest buffers.
func (r *reply) put(b []byte) {
	off := 0
	for _, buf := range r.bufs {
		if len(b) == 0 {
			return
		}
		if r.written < off+len(buf) {
			n := copy(buf[r.written-off:], b)
			r.written += n
			b = b[n:]
		}
		off += len(buf)
	}
}

// putLerror writes an Rlerror with errno into bufs and returns its length
// (0 when it does not fit).
func putLerror(bufs [][]byte, tag uint16, errno uint32) int {
	var m [rlerrorLen]byte
	binary.LittleEndian.PutUint32(m[:], rlerrorLen)
	m[4] = msgRlerror
	binary.LittleEndian.PutUint16(m[5:], tag)
	binary.LittleEndian.PutUint32(m[7:], errno)
	r := reply{bufs: bufs}
	for _, b := range bufs {
		r.capacity += len(b)
	}
	if r.capacity < rlerrorLen {
		return 0
	}
	r.put(m[:])
	return r.written
}
