package usernetd

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// txBatcher carries the stack's frames to the device in batches: Write
// queues a frame (header and all, copied) and returns, and one goroutine
// sends whatever has queued with one sendmmsg(2). The stack makes a burst
// of segments at a time (a window's worth, every ACK that opens it), so
// on a busy CPU a whole burst goes over in one system call, and the
// device's worker, woken once, reads it with one recvmmsg: where each
// frame was a send, a wakeup of the other process and a read.
type txBatcher struct {
	rc syscall.RawConn

	mu      sync.Mutex
	space   *sync.Cond // signalled when the queue has room or is done
	queue   [][]byte
	queued  int      // bytes in queue
	spare   [][]byte // buffers the sender is done with
	spared  int      // their capacity
	stopped bool
	err     error // why the sender stopped

	kick chan struct{}
	done chan struct{}

	calls, frames atomic.Uint64 // sendmmsg calls that sent, frames sent
}

// txQueueMax bounds the frames queued ahead of the socket and
// txQueueBytes their bytes (a super-frame is up to 64 KiB): beyond either
// Write waits, which is the back-pressure of a guest that is not taking
// frames. txQueueBytes also bounds what the spare buffers keep.
const (
	txQueueMax   = 256
	txQueueBytes = 1 << 20
)

// txBatchMax is the most frames one sendmmsg sends.
const txBatchMax = 64

func newTxBatcher(rc syscall.RawConn) *txBatcher {
	t := &txBatcher{rc: rc, kick: make(chan struct{}, 1), done: make(chan struct{})}
	t.space = sync.NewCond(&t.mu)
	go t.run()
	return t
}

// write queues hdr and the frame's parts as one message.
func (t *txBatcher) write(hdr []byte, frame ...[]byte) error {
	t.mu.Lock()
	for (len(t.queue) >= txQueueMax || t.queued >= txQueueBytes) && !t.stopped {
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
	t.queue = append(t.queue, buf)
	t.queued += len(buf)
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
	return nil
}

// stop ends the sender (its socket is being closed) and waits for it.
func (t *txBatcher) stop() {
	t.mu.Lock()
	t.stopped = true
	t.space.Broadcast()
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
	<-t.done
}

func (t *txBatcher) run() {
	defer close(t.done)
	var batch [][]byte
	msgs := make([]mmsghdr, txBatchMax)
	iovs := make([]unix.Iovec, txBatchMax)
	for range t.kick {
		t.mu.Lock()
		if t.stopped {
			t.mu.Unlock()
			return
		}
		batch, t.queue = t.queue, batch[:0]
		t.queued = 0
		t.space.Broadcast()
		t.mu.Unlock()
		err := t.send(batch, msgs, iovs)
		t.mu.Lock()
		for _, b := range batch {
			if t.spared+cap(b) > txQueueBytes {
				break
			}
			t.spare = append(t.spare, b)
			t.spared += cap(b)
		}
		if err != nil {
			t.stopped, t.err = true, err
			t.space.Broadcast()
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		clear(batch)
	}
}

// send sends every frame of batch in order, waiting while the socket is
// full.
func (t *txBatcher) send(batch [][]byte, msgs []mmsghdr, iovs []unix.Iovec) error {
	for len(batch) > 0 {
		n := min(len(batch), len(msgs))
		for i := range n {
			iovs[i].Base = unsafe.SliceData(batch[i])
			iovs[i].SetLen(len(batch[i]))
			msgs[i] = mmsghdr{}
			msgs[i].hdr.Iov = &iovs[i]
			msgs[i].hdr.Iovlen = 1
		}
		var sent int
		var serr error
		err := t.rc.Write(func(fd uintptr) bool {
			for {
				r, e := rawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
				switch e {
				case 0:
					sent = int(r)
					return true
				case unix.EINTR:
					continue
				case unix.EAGAIN:
					return false // wait until the socket has room
				}
				serr = e
				return true
			}
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		t.calls.Add(1)
		t.frames.Add(uint64(sent))
		batch = batch[sent:]
	}
	return nil
}

// mmsghdr is struct mmsghdr of sendmmsg(2), which x/sys/unix lacks.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}
