package virtio9p

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// maxMessage is the largest 9P message the device takes, the p9 server's
// own limit before (and above) any msize.
const maxMessage = 4 << 20

// minMsize is the smallest msize a Tversion may ask for (Linux's client
// needs at least 4096 too).
const minMsize = 4096

type counters struct {
	requests, malformed, bytesIn, bytesOut atomic.Uint64
}

// worker serves the request queue of one activation, one chain at a time,
// with its own p9 server session.
type worker struct {
	d    *Device
	q    *virtio.Queue
	kick int
	irq  virtio.Interrupt
	fail func(error)

	stopFD int
	quit   chan struct{}
	done   chan struct{}
	conn   *conn

	msize uint32 // negotiated by Tversion; maxMessage until then
	req   []byte // the request being served, reused
	wbufs [][]byte
}

func newWorker(d *Device, a virtio.Activation) (*worker, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("virtio-9p: stop eventfd: %w", err)
	}
	w := &worker{
		d: d, q: a.Queues[0], kick: a.Kicks[0], fail: a.Fail,
		stopFD: fd, quit: make(chan struct{}), done: make(chan struct{}),
		conn: newConn(), msize: maxMessage,
	}
	if len(a.Interrupts) > 0 {
		w.irq = a.Interrupts[0]
	}
	if w.fail == nil {
		w.fail = func(error) {}
	}
	return w, nil
}

func (w *worker) start() {
	srv := p9.NewServer(w.d.attacher)
	go srv.Handle(w.conn, w.conn)
	go w.run()
}

// stop ends the worker and the session and waits for the worker (not for
// a server call stuck in the host: its reply is dropped).
func (w *worker) stop() {
	close(w.quit)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(w.stopFD, one[:])
	<-w.done
	w.conn.Close()
	unix.Close(w.stopFD)
}

func (w *worker) run() {
	defer close(w.done)
	for w.wait() {
		for {
			w.q.DisableNotify()
			if !w.drain() {
				return
			}
			if !w.q.EnableNotify() {
				break
			}
		}
	}
}

// wait sleeps until a kick (true) or stop (false).
func (w *worker) wait() bool {
	fds := []unix.PollFd{{Fd: int32(w.kick), Events: unix.POLLIN}, {Fd: int32(w.stopFD), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || fds[1].Revents != 0 {
			return false
		}
		if fds[0].Revents != 0 {
			var buf [8]byte
			unix.Read(w.kick, buf[:])
			return true
		}
	}
}

// drain serves every available chain; false means stop.
func (w *worker) drain() bool {
	for {
		c, ok, err := w.q.Pop()
		if err != nil {
			w.fail(err)
			<-w.quit // the queue is dead until the driver resets the device
			return false
		}
		if !ok {
			return true
		}
		n, alive := w.serve(c)
		if !alive {
			return false
		}
		w.d.stats.requests.Add(1)
		w.d.stats.bytesOut.Add(uint64(n))
		w.q.AddUsed(c.Head, uint32(n))
		w.q.PublishUsed()
		if w.q.NeedsInterrupt() && w.irq != nil {
			w.irq.Trigger()
		}
	}
}

// serve answers one chain and returns the bytes written into it; alive is
// false when the device stopped meanwhile.
func (w *worker) serve(c virtio.Chain) (written int, alive bool) {
	w.req, w.wbufs = w.req[:0], w.wbufs[:0]
	capacity, tooBig := 0, false
	for _, b := range c.Bufs {
		s := b.Buf
		switch {
		case b.Write:
			w.wbufs = append(w.wbufs, s)
			capacity += len(s)
		case len(w.req)+len(s) > maxMessage:
			tooBig = true
		default:
			// A copy: the guest may change its buffers while the server reads.
			w.req = append(w.req, s...)
		}
	}
	w.d.stats.bytesIn.Add(uint64(len(w.req)))
	if len(w.req) < headerLen || capacity < rlerrorLen {
		w.d.stats.malformed.Add(1)
		return 0, true // no tag to answer, or no room for any answer
	}
	size := binary.LittleEndian.Uint32(w.req)
	tag := binary.LittleEndian.Uint16(w.req[5:])
	switch {
	case tooBig || size > w.msize:
		return w.lerror(tag, unix.EMSGSIZE), true
	case size < headerLen || size > uint32(len(w.req)):
		return w.lerror(tag, unix.EINVAL), true
	case w.req[4] == msgTversion && size >= rlerrorLen && binary.LittleEndian.Uint32(w.req[7:]) < minMsize:
		// The server would take any msize, and then drop the whole
		// session at the next message longer than it.
		return w.lerror(tag, unix.EINVAL), true
	case w.req[4] == msgTxattrcreate:
		// p9's server takes any attr_size here and then buffers every
		// Twrite to the fid until its Tclunk, with no bound; the share
		// keeps no xattrs anyway, so creation stops here.
		return putLerror(w.wbufs, tag, uint32(unix.EOPNOTSUPP)), true
	case w.req[4] == msgTflush:
		// Requests are served one at a time, so the one to flush has
		// already been answered: Rflush at once. (The server would wait
		// for the old tag, and forever when it is the Tflush's own.)
		return w.rflush(tag), true
	}
	r := &reply{bufs: w.wbufs, capacity: capacity, tag: tag, done: make(chan struct{})}
	w.conn.expect(r)
	select {
	case w.conn.reqs <- w.req[:size]:
	case <-w.quit:
		return 0, false
	}
	// done closes at the reply's last byte (conn.Write follows the
	// server's framing), and the server replies only after reading the
	// whole request: from then on w.req is the worker's to reuse.
	select {
	case <-r.done:
	case <-w.quit:
		return 0, false
	}
	if r.overflow {
		return w.lerror(tag, unix.EMSGSIZE), true
	}
	if r.head[4] == msgRversion && r.got >= rlerrorLen {
		if m := binary.LittleEndian.Uint32(r.head[7:]); m >= headerLen {
			w.msize = min(m, maxMessage)
		}
	}
	return r.written, true
}

// rflush answers a Tflush.
func (w *worker) rflush(tag uint16) int {
	var m [headerLen]byte
	binary.LittleEndian.PutUint32(m[:], headerLen)
	m[4] = msgRflush
	binary.LittleEndian.PutUint16(m[5:], tag)
	r := reply{bufs: w.wbufs, capacity: rlerrorLen}
	r.put(m[:])
	return r.written
}

// lerror answers the chain in flight with an Rlerror from the device.
func (w *worker) lerror(tag uint16, errno unix.Errno) int {
	w.d.stats.malformed.Add(1)
	return putLerror(w.wbufs, tag, uint32(errno))
}
