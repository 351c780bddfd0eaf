package virtionet

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/uring"
	"tinyvmm/virtio"
)

// ringWait is the worker's wait through an io_uring of its own
// (Tuning.WaitRing) instead of epoll_wait: the worker sleeps in one
// io_uring_enter with polls armed on the kicks, the backend and the epoll
// set of everything else (the stop eventfd and the timers), and the
// irqfd writes of the run before go in the same enter. A wait that need
// not sleep (a handler is queued) reads the completion queue from memory
// and makes no system call unless it has requests to hand over.
//
// The kicks and the epoll set are multishot polls, each wakeup of their
// wait queue one completion, as the edge-triggered epoll entries were:
// a kick is never read. The backend is polled once at a time and armed
// again before each sleep while rx or tx waits on it, so that it reports
// a frame still unread (a lone frame is read alone) as level-triggered
// epoll did.
type ringWait struct {
	r *uring.Ring

	kickArmed  [2]bool
	epArmed    bool
	inArmed    bool // a single POLLIN poll of the backend is in flight
	outArmed   bool // a single POLLOUT poll of the backend is in flight
	backendOff bool // the backend is gone (dropBackend): no more polls

	irqFd     [2]int  // the irqfd to write at the next wait, or -1
	irqQueued [2]bool // its write is queued
	one       []byte  // 1 as an eventfd counter, on the heap for the kernel

	kicked [2]bool // scratch of wait
}

// Completion tags (user data) of the ring's requests.
const (
	ringKickRx = iota + 1
	ringKickTx
	ringBackendIn
	ringBackendOut
	ringEpoll
	ringIrqRx
	ringIrqTx
)

// waitRingEntries is the ring's size: a wait queues at most the two
// kicks, the epoll set, two backend polls and two irqfd writes.
const waitRingEntries = 16

// newWaitRing is uring.NewWaiter; tests replace it to see the fallback.
var newWaitRing = uring.NewWaiter

// errNoWaitRing: the kernel takes no multishot polls or no WRITE, which
// the ring wait needs.
var errNoWaitRing = errors.New("the kernel lacks multishot polls, IORING_OP_WRITE or IOSQE_CQE_SKIP_SUCCESS")

// openWaitRing sets the ring wait up, or returns why the worker stays
// with epoll. The kicks and the backend are then out of the epoll set,
// which keeps the stop eventfd and the timers.
func (w *worker) openWaitRing() error {
	r, err := newWaitRing(waitRingEntries)
	if err != nil {
		return err
	}
	rw := &ringWait{r: r, irqFd: [2]int{-1, -1}, one: []byte{1, 0, 0, 0, 0, 0, 0, 0}}
	if err := probeMultishot(r); err != nil {
		r.Close()
		return err
	}
	for _, fd := range []int{w.kick[rxQueue], w.kick[txQueue], w.fd} {
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
			r.Close()
			return fmt.Errorf("epoll del fd %d: %v", fd, err)
		}
	}
	w.wring = rw
	return nil
}

// probeMultishot arms a multishot poll on an eventfd and writes it, so
// that a kernel without multishot polls (before Linux 5.13: -EINVAL) or
// without IORING_OP_WRITE is found at open and not at the first frame.
func probeMultishot(r *uring.Ring) error {
	if !r.CanWrite() {
		return errNoWaitRing
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %v", err)
	}
	defer unix.Close(efd)
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if !r.PollAdd(efd, unix.POLLIN, true, 1) || !r.WriteBuf(efd, one, true, 2) {
		return errors.New("io_uring: the probe did not fit the ring")
	}
	if _, err := r.Submit(1); err != nil {
		return err
	}
	var pollRes, writeRes int32
	more, wrote := false, false
	r.ReapFlags(func(ud uint64, res int32, flags uint32) {
		switch ud {
		case 1:
			pollRes, more = res, more || uring.More(flags)
		case 2:
			writeRes, wrote = res, true
		}
	})
	switch {
	case wrote && writeRes == -int32(unix.EINVAL):
		return errNoWaitRing // no quiet writes
	case wrote:
		return fmt.Errorf("io_uring probe write: %d", writeRes)
	case pollRes <= 0 || !more:
		return errNoWaitRing
	}
	// The poll stays armed until the ring closes; the worker's own
	// requests carry other tags.
	return nil
}

func (rw *ringWait) close() {
	if rw != nil {
		rw.r.Close()
	}
}

// deferIrq takes the interrupt of queue qi for the next wait when irq is
// an irqfd, and reports whether it did; otherwise the caller triggers it.
func (rw *ringWait) deferIrq(qi int, irq virtio.Interrupt) bool {
	ei, ok := irq.(virtio.EventfdInterrupt)
	if !ok {
		return false
	}
	fd, err := ei.TriggerFd()
	if err != nil || fd < 0 {
		return true // masked (pending) or closed: nothing to write now
	}
	rw.irqFd[qi] = fd
	return true
}

// wait is epoll_wait for the ring (timeout -1 or 0): it arms what is not
// armed, queues the irqfd writes, enters the kernel only when it has
// requests to hand over or must sleep, and turns the completions into
// the epoll events run dispatches: at most one per fd.
func (w *worker) ringWaitEvents(events []unix.EpollEvent, timeout int) (int, error) {
	rw := w.wring
	r := rw.r
	ok := true
	for qi, fd := range rw.irqFd {
		if fd >= 0 && !rw.irqQueued[qi] {
			ok = ok && r.WriteBuf(fd, rw.one, true, uint64(ringIrqRx+qi))
			rw.irqQueued[qi] = ok
		}
	}
	ok = ok && rw.arm(w)
	if !ok {
		return 0, errors.New("io_uring: the wait's requests did not fit the ring")
	}
	calls, err := r.Wait(timeout != 0)
	w.ringCalls.Add(uint64(calls))
	if err != nil {
		return 0, err
	}
	for qi := range rw.irqQueued {
		if rw.irqQueued[qi] {
			rw.irqQueued[qi], rw.irqFd[qi] = false, -1
		}
	}
	rw.kicked = [2]bool{}
	var backend uint32
	epoll := false
	r.ReapFlags(func(ud uint64, res int32, flags uint32) {
		more := uring.More(flags)
		switch ud {
		case ringKickRx, ringKickTx:
			qi := int(ud - ringKickRx)
			rw.kickArmed[qi] = more
			if res > 0 {
				rw.kicked[qi] = true
			}
		case ringEpoll:
			rw.epArmed = more
			epoll = epoll || res > 0
		case ringBackendIn:
			rw.inArmed = false
			if res > 0 {
				backend |= uint32(res)
			}
		case ringBackendOut:
			rw.outArmed = false
			if res > 0 {
				backend |= uint32(res)
			}
		}
		// An irqfd write posts a completion only when it failed, which
		// the worker does not look at: Trigger's error never was either.
	})
	n := 0
	for qi, k := range rw.kicked {
		if k && !w.broken[qi] && n < len(events) {
			events[n] = unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(w.kick[qi])}
			n++
		}
	}
	// What epoll would report of the backend: POLLIN only while rx
	// watches it, POLLOUT only while tx waits for room.
	if !w.tapWatched {
		backend &^= unix.POLLIN
	}
	if !w.txFull {
		backend &^= unix.POLLOUT
	}
	if backend != 0 && !rw.backendOff && n < len(events) {
		events[n] = unix.EpollEvent{Events: backend, Fd: int32(w.fd)}
		n++
	}
	if epoll && n < len(events) {
		m, err := unix.EpollWait(w.epfd, events[n:], 0)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return n, err
		}
		n += max(m, 0)
	}
	return n, nil
}

// arm queues the polls that are not in flight and are wanted.
func (rw *ringWait) arm(w *worker) bool {
	r := rw.r
	for qi, armed := range rw.kickArmed {
		if !armed && !w.broken[qi] {
			if !r.PollAdd(w.kick[qi], unix.POLLIN, true, uint64(ringKickRx+qi)) {
				return false
			}
			rw.kickArmed[qi] = true
		}
	}
	if !rw.epArmed {
		if !r.PollAdd(w.epfd, unix.POLLIN, true, ringEpoll) {
			return false
		}
		rw.epArmed = true
	}
	if rw.backendOff {
		return true
	}
	if w.tapWatched && !rw.inArmed {
		if !r.PollAdd(w.fd, unix.POLLIN, false, ringBackendIn) {
			return false
		}
		rw.inArmed = true
	}
	if w.txFull && !rw.outArmed {
		if !r.PollAdd(w.fd, unix.POLLOUT, false, ringBackendOut) {
			return false
		}
		rw.outArmed = true
	}
	return true
}

// flushIrqs writes the interrupts still held for the next wait, when the
// worker leaves without one.
func (rw *ringWait) flushIrqs() {
	for qi, fd := range rw.irqFd {
		if fd >= 0 && !rw.irqQueued[qi] {
			unix.Write(fd, rw.one)
		}
		rw.irqFd[qi] = -1
	}
	rw.r.Wait(false) // hands over writes queued but not yet submitted
}
