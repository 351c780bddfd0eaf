package virtiofs

import (
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// FUSE framing the device itself needs: the request header's length,
// opcode and unique, and the reply header.
const (
	inHeaderLen   = 40
	outHeaderLen  = 16
	opInit        = 26
	opForget      = 2
	opBatchForget = 42
	opInterrupt   = 36
	opRead        = 15
)

// session is one activation: the FUSE session and a worker per queue.
type session struct {
	d  *Device
	fs *fileSystem
	ps *fuse.ProtocolServer

	// initMu: INIT sets what go-fuse parses every other request with, so
	// it runs alone.
	initMu sync.RWMutex
	slots  chan struct{} // MaxInflight tokens
	wg     sync.WaitGroup

	workers []*queueWorker
	quit    chan struct{}
	logged  atomic.Uint32
}

// queueWorker takes chains off one queue and hands each to a goroutine.
type queueWorker struct {
	s    *session
	idx  int // the queue's index: 0 is hiprio
	q    *virtio.Queue
	kick *os.File // a dup of the queue's kick eventfd, in Go's poller
	irq  virtio.Interrupt
	fail func(error)
	done chan struct{}

	mu sync.Mutex // the queue: Pop, AddUsed, PublishUsed, notify state
}

func newSession(d *Device, a virtio.Activation) (*session, error) {
	fs, err := newFileSystem(d.cfg.Share, d.cfg.ReadOnly, d.cfg.Cache, d.cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("virtio-fs %s: %w", d.cfg.Tag, err)
	}
	opts := &fuse.MountOptions{
		MaxWrite: MaxWrite, MaxBackground: MaxInflight,
		// go-fuse's own messages about malformed requests: the guest
		// writes them, so they go nowhere (Stats counts the errors).
		Logger: log.New(io.Discard, "", 0),
	}
	s := &session{
		d: d, fs: fs, ps: fuse.NewProtocolServer(fs, opts),
		slots: make(chan struct{}, MaxInflight), quit: make(chan struct{}),
	}
	fail := a.Fail
	if fail == nil {
		fail = func(error) {}
	}
	for i, q := range a.Queues {
		if q == nil {
			continue // a queue the driver did not enable: nothing comes on it
		}
		// The worker waits for kicks in Go's poller, not in a poll(2)
		// of its own: a kick then wakes one thread, which goes on to
		// run the request it starts, where a blocking wait would wake
		// a second thread for it. The dup is the worker's to close at
		// a reset; the transport keeps the eventfd.
		kfd, err := unix.FcntlInt(uintptr(a.Kicks[i]), unix.F_DUPFD_CLOEXEC, 0)
		if err == nil {
			err = unix.SetNonblock(kfd, true)
		}
		if err != nil {
			s.closeKicks()
			return nil, fmt.Errorf("virtio-fs: queue %d kick: %w", i, err)
		}
		w := &queueWorker{s: s, idx: i, q: q, kick: os.NewFile(uintptr(kfd), "kick"), fail: fail, done: make(chan struct{})}
		if i < len(a.Interrupts) {
			w.irq = a.Interrupts[i]
		}
		s.workers = append(s.workers, w)
	}
	return s, nil
}

func (s *session) start() {
	for _, w := range s.workers {
		go w.run()
	}
}

// stop ends the workers, closes every open file and waits for the
// requests in flight.
func (s *session) stop() {
	close(s.quit)
	s.closeKicks() // wakes the workers' reads
	for _, w := range s.workers {
		<-w.done
	}
	s.fs.closeAll()
	s.wg.Wait()
}

func (s *session) closeKicks() {
	for _, w := range s.workers {
		w.kick.Close()
	}
}

func (s *session) logf(format string, args ...any) {
	if s.logged.Add(1) <= 10 {
		s.d.cfg.Logf("virtio-fs %s: "+format, append([]any{s.d.cfg.Tag}, args...)...)
	}
}

func (w *queueWorker) run() {
	defer close(w.done)
	var buf [8]byte
	for first := true; ; first = false {
		// A kick (the counter read and reset), or the close of a reset.
		// The first pass looks without one: chains made available
		// before the device started need none.
		if !first {
			if _, err := w.kick.Read(buf[:]); err != nil {
				return
			}
		}
		for {
			w.mu.Lock()
			w.q.DisableNotify()
			w.mu.Unlock()
			if !w.drain() {
				return
			}
			w.mu.Lock()
			more := w.q.EnableNotify()
			w.mu.Unlock()
			if !more {
				break
			}
		}
	}
}

// drain starts serving every available chain; false means stop.
func (w *queueWorker) drain() bool {
	for {
		// A slot first: with MaxInflight requests being served, the
		// rest wait in the ring.
		select {
		case w.s.slots <- struct{}{}:
		case <-w.s.quit:
			return false
		}
		w.mu.Lock()
		c, ok, err := w.q.Pop()
		var bufs []virtio.Desc
		if ok {
			bufs = append(bufs, c.Bufs...) // Pop reuses c.Bufs' array
		}
		w.mu.Unlock()
		if err != nil || !ok {
			<-w.s.slots
			if err != nil {
				w.fail(err)
				<-w.s.quit // the queue is dead until the driver resets the device
				return false
			}
			return true
		}
		w.s.wg.Add(1)
		go w.serve(c.Head, bufs)
	}
}

// serve answers one chain and returns it to the guest.
func (w *queueWorker) serve(head uint16, bufs []virtio.Desc) {
	defer w.s.wg.Done()
	defer func() { <-w.s.slots }()
	st := &w.s.d.stats
	if n := st.inflight.Add(1); n > st.maxInflight.Load() {
		st.maxInflight.Store(n) // a statistic: a lost race costs nothing
	}
	defer st.inflight.Add(-1)
	st.queues[w.idx].Add(1)

	start := time.Now()
	written, opcode := w.s.handle(bufs)
	if opcode == opRead {
		st.readNanos.Add(uint64(time.Since(start)))
	}
	st.requests.Add(1)
	st.bytesOut.Add(uint64(written))
	select {
	case <-w.s.quit:
		// A reset: the driver forgets the ring, and it may already
		// belong to the next activation.
		return
	default:
	}
	w.mu.Lock()
	w.q.AddUsed(head, uint32(written))
	w.q.PublishUsed()
	irq := w.q.NeedsInterrupt()
	w.mu.Unlock()
	if irq && w.irq != nil {
		w.irq.Trigger()
	}
}

// handle serves one request and returns the bytes written into the
// chain's writable buffers and the request's opcode.
func (s *session) handle(bufs []virtio.Desc) (written int, opcode uint32) {
	var in, out [][]byte
	inLen, outLen := 0, 0
	for _, b := range bufs {
		if b.Write {
			// Room past MaxReply is never needed: left out, so no
			// reply can make the device allocate more.
			if room := MaxReply - outLen; room > 0 {
				buf := b.Buf[:min(len(b.Buf), room)]
				out = append(out, buf)
				outLen += len(buf)
			}
			continue
		}
		in = append(in, b.Buf)
		inLen += len(b.Buf)
	}
	s.d.stats.bytesIn.Add(uint64(inLen))
	var hdr [inHeaderLen]byte
	if copyFrom(hdr[:], in) < inHeaderLen {
		s.d.stats.errors.Add(1)
		return 0, 0 // no unique to answer
	}
	opcode = binary.LittleEndian.Uint32(hdr[4:])
	unique := binary.LittleEndian.Uint64(hdr[8:])
	s.d.stats.countOp(opcode)
	noReply := opcode == opForget || opcode == opBatchForget || opcode == opInterrupt
	if inLen > MaxRequest {
		s.d.stats.errors.Add(1)
		if noReply {
			return 0, opcode
		}
		return errorReply(out, unique, unix.E2BIG), opcode
	}

	if opcode == opInit {
		s.initMu.Lock()
		defer s.initMu.Unlock()
	} else {
		s.initMu.RLock()
		defer s.initMu.RUnlock()
	}
	n, status, panicked := s.call(in, out)
	if panicked != nil {
		s.d.stats.errors.Add(1)
		s.logf("request %d (opcode %d) panicked: %v", unique, opcode, panicked)
		n, status = 0, fuse.EIO
	}
	if n > 0 {
		// go-fuse checks the room only for the replies whose size the
		// request gives (READ, READDIR, xattrs); a longer one (a
		// READLINK, say) it cuts at the end of the room, header and
		// all. The guest gets an error instead of a torn reply.
		var h [4]byte
		copyFrom(h[:], out)
		if int(binary.LittleEndian.Uint32(h[:])) != n {
			s.d.stats.errors.Add(1)
			return errorReply(out, unique, unix.ERANGE), opcode
		}
	}
	if n == 0 && !status.Ok() && !noReply {
		// go-fuse wrote nothing (the chain has too little room, say):
		// the error, so the guest's request does not wait forever.
		s.d.stats.errors.Add(1)
		return errorReply(out, unique, syscall.Errno(status)), opcode
	}
	return n, opcode
}

// call runs go-fuse on one request, turning a panic into an error.
func (s *session) call(in, out [][]byte) (n int, status fuse.Status, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	n, status = s.ps.HandleRequest(in, out)
	return n, status, nil
}

// errorReply writes a reply header with -errno into out, if it fits.
func errorReply(out [][]byte, unique uint64, errno syscall.Errno) int {
	var m [outHeaderLen]byte
	binary.LittleEndian.PutUint32(m[0:], outHeaderLen)
	binary.LittleEndian.PutUint32(m[4:], uint32(-int32(errno)))
	binary.LittleEndian.PutUint64(m[8:], unique)
	total := 0
	for _, b := range out {
		total += len(b)
	}
	if total < outHeaderLen {
		return 0
	}
	rest := m[:]
	for _, b := range out {
		k := copy(b, rest)
		rest = rest[k:]
		if len(rest) == 0 {
			break
		}
	}
	return outHeaderLen
}

// copyFrom copies the first bytes of iov into dst.
func copyFrom(dst []byte, iov [][]byte) int {
	n := 0
	for _, b := range iov {
		if n == len(dst) {
			break
		}
		n += copy(dst[n:], b)
	}
	return n
}
