package virtio9p

import (
	"encoding/binary"
	"io"
	"sync"
)

// 9P framing: size[4] type[1] tag[2], then the body.
const (
	headerLen   = 7
	rlerrorLen  = headerLen + 4 // Rlerror: ecode[4]
	msgRlerror  = 7
	msgTversion = 100
	msgTflush   = 108
	msgRflush   = 109
	msgRversion = 101
)

// conn is the byte stream between the device and one p9 server session:
// the server reads requests from it and writes replies to it.
type conn struct {
	reqs      chan []byte
	closed    chan struct{}
	closeOnce sync.Once

	// pending is the rest of the request being read. Only the server's
	// receiving goroutine touches it (the server serialises receives).
	pending []byte

	mu    sync.Mutex
	reply *reply // where the next reply goes; nil drops it
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
// pieces as it likes, go into the chain in flight.
func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reply != nil && c.reply.write(p) {
		close(c.reply.done)
		c.reply = nil
	}
	return len(p), nil
}

// expect names the chain the next reply goes into.
func (c *conn) expect(r *reply) {
	c.mu.Lock()
	c.reply = r
	c.mu.Unlock()
}

// Close ends the session: the server's next Read sees EOF, and no reply
// reaches guest memory any more. Safe to call more than once (the server
// closes both of its ends).
func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	c.reply = nil
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
	total    int              // the reply's size field, once the header is in
	got      int              // reply bytes received
	written  int              // bytes put into guest memory
	overflow bool             // the reply does not fit in the chain: dropped
}

// write takes the next reply bytes and reports whether the reply is
// complete. Bytes past its end are ignored.
func (r *reply) write(p []byte) bool {
	for len(p) > 0 {
		if r.got < headerLen {
			n := copy(r.head[r.got:headerLen], p)
			r.got += n
			p = p[n:]
			if r.got < headerLen {
				return false
			}
			r.total = int(binary.LittleEndian.Uint32(r.head[:]))
			binary.LittleEndian.PutUint16(r.head[5:], r.tag) // the server sends no tag for a request it could not decode
			if r.total < headerLen || r.total > r.capacity {
				r.overflow = true
				return true
			}
			r.put(r.head[:headerLen])
			if r.got == r.total {
				return true
			}
			continue
		}
		n := min(len(p), r.total-r.got)
		if r.got < rlerrorLen {
			copy(r.head[r.got:], p[:n])
		}
		r.put(p[:n])
		r.got += n
		p = p[n:]
		if r.got == r.total {
			return true
		}
	}
	return false
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
