package usernetd

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// txBatcher carries the stack's frames to the device in batches: write
// queues a frame (header and all, copied), and whoever sends takes
// everything queued with one sendmmsg(2). The stack makes a burst of
// segments at a time (a window's worth, every ACK that opens it), so a
// whole burst goes over in one system call, and the device's worker,
// woken once, reads it with one recvmmsg: where each frame was a send, a
// wakeup of the other process and a read.
//
// The sender is the writer itself when no one else is sending (flush):
// a lone frame (an ACK) then goes out in the goroutine that made it,
// with no other goroutine to wake. A writer that finds the socket full
// leaves what is left to the batcher's goroutine, which waits for room;
// frames queued meanwhile go out with the next send, whoever makes it.
// hold and release let a burst queue whole before it is sent.
type txBatcher struct {
	rc syscall.RawConn

	mu      sync.Mutex
	space   *sync.Cond // signalled when the queue has room or is done
	queue   [][]byte
	queued  int      // bytes in queue
	spare   [][]byte // buffers the sender is done with
	spared  int      // their capacity
	batch   [][]byte // the slice the sender swaps with queue
	sending bool     // a sender has taken a batch
	holds   int      // writers queueing a burst (hold): no flush until the last releases
	stopped bool
	err     error // why sending stopped

	msgs []mmsghdr // the sender's
	iovs []unix.Iovec

	kick chan struct{}
	done chan struct{}

	calls, frames atomic.Uint64 // sendmmsg calls that sent, frames sent
}

// txQueueMax bounds the frames queued ahead of the socket and
// txQueueBytes their bytes (a super-frame is up to 64 KiB): beyond either
// write waits, which is the back-pressure of a guest that is not taking
// frames. txQueueBytes also bounds what the spare buffers keep.
const (
	txQueueMax   = 256
	txQueueBytes = 1 << 20
)

// TxGoroutineEnv, set in tinyvmm-usernet's environment, leaves every
// send to the batcher's goroutine, as before writers sent themselves:
// the benchmark's way to compare the two.
const TxGoroutineEnv = "TINYVMM_USERNET_TX_GOROUTINE"

var txInline = os.Getenv(TxGoroutineEnv) == ""

// txBatchMax is the most frames one sendmmsg sends.
const txBatchMax = 64

func newTxBatcher(rc syscall.RawConn) *txBatcher {
	t := &txBatcher{rc: rc, kick: make(chan struct{}, 1), done: make(chan struct{}),
		msgs: make([]mmsghdr, txBatchMax), iovs: make([]unix.Iovec, txBatchMax)}
	t.space = sync.NewCond(&t.mu)
	go t.run()
	return t
}

// write queues hdr and the frame's parts as one message and, unless a
// burst is being queued (hold) or someone is sending, sends what is
// queued.
func (t *txBatcher) write(hdr []byte, frame ...[]byte) error {
	t.mu.Lock()
	for (len(t.queue) >= txQueueMax || t.queued >= txQueueBytes) && !t.stopped {
		// Full: the goroutine sends (a writer holding a burst, or
		// another one, may never flush) and waits for room.
		t.kickLocked()
		t.space.Wait()
	}
	if t.stopped {
		err := t.err
		t.mu.Unlock()
		if err == nil {
			err = net.ErrClosed
		}
		return err
	}
	var buf []byte
	if n := len(t.spare); n > 0 {
		buf, t.spare = t.spare[n-1][:0], t.spare[:n-1]
		t.spared -= cap(buf)
	}
	buf = append(buf, hdr...)
	for _, p := range frame {
		buf = append(buf, p...)
	}
	traceFrame(trLinkTx, buf[len(hdr):])
	t.queue = append(t.queue, buf)
	t.queued += len(buf)
	flush := t.holds == 0
	t.mu.Unlock()
	if flush {
		t.flush()
	}
	return nil
}

// flush sends what is queued: at once, or with txInline off by the
// goroutine.
func (t *txBatcher) flush() {
	if !txInline {
		t.mu.Lock()
		t.kickLocked()
		t.mu.Unlock()
		return
	}
	t.drain(false)
}

// hold starts a burst: the frames written until release are sent
// together, at release.
func (t *txBatcher) hold() {
	t.mu.Lock()
	t.holds++
	t.mu.Unlock()
}

// release ends a burst hold began and sends what is queued.
func (t *txBatcher) release() {
	t.mu.Lock()
	t.holds--
	flush := t.holds == 0
	t.mu.Unlock()
	if flush {
		t.flush()
	}
}

func (t *txBatcher) kickLocked() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// stop ends the sender (its socket is being closed) and waits for it.
func (t *txBatcher) stop() {
	t.mu.Lock()
	t.stopped = true
	t.space.Broadcast()
	t.kickLocked()
	t.mu.Unlock()
	<-t.done
}

func (t *txBatcher) run() {
	defer close(t.done)
	for range t.kick {
		t.mu.Lock()
		stopped := t.stopped
		t.mu.Unlock()
		if stopped {
			return
		}
		t.drain(true)
	}
}

// drain sends everything queued, as the one sender, until the queue is
// empty; if another sender is at it, that one will. Without wait it
// stops at a full socket and leaves the rest first in the queue for the
// goroutine, which it kicks.
func (t *txBatcher) drain(wait bool) {
	t.mu.Lock()
	if t.sending {
		t.mu.Unlock()
		return
	}
	t.sending = true
	for len(t.queue) > 0 && !t.stopped {
		batch := t.queue
		t.queue, t.batch = t.batch[:0], nil
		t.queued = 0
		t.space.Broadcast()
		t.mu.Unlock()
		sent, err := t.send(batch, wait)
		t.mu.Lock()
		for _, b := range batch[:sent] {
			if t.spared+cap(b) > txQueueBytes {
				break
			}
			t.spare = append(t.spare, b)
			t.spared += cap(b)
		}
		if err != nil {
			t.stopped, t.err = true, err
			t.space.Broadcast()
			break
		}
		if sent < len(batch) { // the socket is full: the goroutine waits for room
			rest := batch[sent:]
			for _, b := range rest {
				t.queued += len(b)
			}
			t.queue = append(rest[:len(rest):len(rest)], t.queue...)
			clear(batch[:sent])
			t.sending = false
			t.kickLocked()
			t.mu.Unlock()
			return
		}
		clear(batch)
		t.batch = batch[:0]
	}
	t.sending = false
	t.mu.Unlock()
}

// send sends the frames of batch in order and returns how many went;
// with wait it waits while the socket is full and sends them all (or
// fails), without it it stops at a full socket.
func (t *txBatcher) send(batch [][]byte, wait bool) (int, error) {
	done := 0
	for done < len(batch) {
		n := min(len(batch)-done, len(t.msgs))
		for i := range n {
			t.iovs[i].Base = unsafe.SliceData(batch[done+i])
			t.iovs[i].SetLen(len(batch[done+i]))
			t.msgs[i] = mmsghdr{}
			t.msgs[i].hdr.Iov = &t.iovs[i]
			t.msgs[i].hdr.Iovlen = 1
		}
		var sent int
		var serr error
		full := false
		err := t.rc.Write(func(fd uintptr) bool {
			for {
				r, e := rawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&t.msgs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
				switch e {
				case 0:
					sent = int(r)
					return true
				case unix.EINTR:
					continue
				case unix.EAGAIN:
					full = true
					return !wait // wait until the socket has room
				}
				serr = e
				return true
			}
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return done, err
		}
		if full && !wait {
			return done, nil
		}
		trace(trLinkSent, sent, 0)
		t.calls.Add(1)
		t.frames.Add(uint64(sent))
		done += sent
	}
	return done, nil
}

// mmsghdr is struct mmsghdr of sendmmsg(2), which x/sys/unix lacks.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}
