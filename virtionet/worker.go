package virtionet

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/schedstat"
	"tinyvmm/internal/sysmon"
	"tinyvmm/internal/threadname"
	"tinyvmm/virtio"
)

// clock is the worker's clock; a test counts its reads.
var clock = time.Now

// burstPollNs is how soon the worker looks at the tx ring again while it
// has set avail_event ahead (the driver then does not kick for every chain).
const burstPollNs = 50_000

// worker serves one queue pair on its own OS thread, like a vhost worker.
// Everything but stop runs on that thread. Its state is cut by job: what
// every handler shares is here; the tx side, the rx side, how it waits and
// where it runs, and the rate limiter's throttle are parts of their own,
// embedded so that each handler names its fields as before.
type worker struct {
	d      *Device
	p      *pair // the pair it serves: its fd, ring and counters
	acked  uint64
	tuning Tuning
	trace  *tracer

	hdrLen    int  // vnet header size
	maxFrame  int  // largest frame (header included) the backend may deliver
	mergeable bool // VIRTIO_NET_F_MRG_RXBUF

	q      [2]*virtio.Queue
	kick   [2]int
	irq    [2]virtio.Interrupt
	broken [2]bool
	fail   func(error)
	fd     int     // backend
	io     frameIO // how frames cross: the pair's IOMode (chooseIO), vectorIO after a failure

	// scratch (scratchBuf) holds one frame: tx, a chain of more buffers
	// than writev takes; rx, frames moved down a batch.
	scratch []byte

	epfd, stopfd int
	stopping     atomic.Bool // handlers return early: Reset waits
	pending      [2]int      // the run queue of the two handlers
	npending     int
	done         chan struct{}

	txState       // tx.go
	rxState       // rx.go, rxpool.go
	pollState     // waiting, busy polling and CPU placement: worker.go, cpus.go
	throttleState // throttle.go
}

// pollState is how the worker waits for work and where its thread runs:
// the poll timer, busy polling (PollUs), SCHED_BATCH (WorkerBatch) and
// where the vCPUs may run (PollLone).
type pollState struct {
	timerfd   int       // the poll timer (notification threshold look)
	polling   bool      // the poll timer is armed
	txPolling bool      // busy polling: tx kicks are off, the run loop looks at the ring
	rxPolling bool      // busy polling: out of rx buffers, rx kicks are off, the run loop looks for more
	pollUntil time.Time // busy polling (PollUs): the worker does not sleep before this

	batchOn bool // the thread runs under SCHED_BATCH (WorkerBatch)

	// PollLone and rx SCHED_BATCH (cpus.go): where the worker may run
	// beside the vCPUs, as last checked.
	cpus          cpuRoom
	cpusCheckedAt time.Time

	// PollLone, per queue: how soon the other queue answers a lone frame
	// (moved), a moving average, and when its last lone frame moved, if
	// not answered yet.
	answerNs [2]int64
	loneAt   [2]time.Time
}

func newWorker(d *Device, p *pair, a virtio.Activation) (*worker, error) {
	w := &worker{
		d: d, p: p, acked: a.Features, tuning: d.cfg.Tuning,
		trace:     newTracer(p.trace),
		hdrLen:    vnetHdrLen(a.Features),
		maxFrame:  maxRxFrame(a.Features, d.cfg.MTU),
		mergeable: a.Features&FeatMrgRxBuf != 0,
		fail:      a.Fail,
		fd:        p.fd,
		done:      make(chan struct{}),
	}
	if w.fail == nil {
		w.fail = func(error) {}
	}
	d.mu.Lock()
	switch p.io {
	case IOSendmmsg:
		w.io = &mmsgIO{}
	case IOUring:
		w.io = newUringIO(p.ring)
	default:
		w.io = vectorIO{}
	}
	d.mu.Unlock()
	for i := range w.q {
		q := a.Queues[i]
		if q == nil || !q.Ready {
			return nil, fmt.Errorf("net %s: queue %d is not ready at DRIVER_OK", d.cfg.Ifname, i)
		}
		q.EventIdx = a.Features&FeatEventIdx != 0
		q.AvailEventAhead = 0
		w.q[i], w.kick[i] = q, a.Kicks[i]
		if i < len(a.Interrupts) {
			w.irq[i] = a.Interrupts[i]
		}
	}
	if err := w.openPoll(); err != nil {
		w.closePoll()
		return nil, fmt.Errorf("net %s: %v", d.cfg.Ifname, err)
	}
	return w, nil
}

// openPoll creates the epoll set: both kicks, the backend (not watched
// until the guest has rx buffers), the stop eventfd and the poll timer.
func (w *worker) openPoll() error {
	var err error
	w.epfd, w.stopfd, w.timerfd, w.irqTimer, w.throttleFd = -1, -1, -1, -1, -1
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll: %v", err)
	}
	if w.stopfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("eventfd: %v", err)
	}
	if w.timerfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		return fmt.Errorf("timerfd: %v", err)
	}
	if w.irqTimer, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		return fmt.Errorf("timerfd: %v", err)
	}
	for _, p := range []struct {
		fd     int
		events uint32
	}{
		// Kicks are edge-triggered and never read, as vhost-net never
		// reads them: each kick is a wakeup of the epoll set whatever the
		// count, and a read per kick would be one more system call on the
		// path of every lone frame (a ping's answer, a TCP ACK). The
		// transport makes fresh kick eventfds for each activation.
		{w.kick[rxQueue], unix.EPOLLIN | unix.EPOLLET}, {w.kick[txQueue], unix.EPOLLIN | unix.EPOLLET},
		{w.fd, 0}, {w.stopfd, unix.EPOLLIN}, {w.timerfd, unix.EPOLLIN}, {w.irqTimer, unix.EPOLLIN},
	} {
		ev := unix.EpollEvent{Events: p.events, Fd: int32(p.fd)}
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, p.fd, &ev); err != nil {
			return fmt.Errorf("epoll add fd %d: %v", p.fd, err)
		}
	}
	return w.openThrottle()
}

func (w *worker) closePoll() {
	for _, fd := range []int{w.epfd, w.stopfd, w.timerfd, w.irqTimer, w.throttleFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (w *worker) start() { go w.run() }

// stop ends the worker and waits until it has left guest memory alone.
func (w *worker) stop() {
	w.stopping.Store(true)
	var one = [8]byte{1}
	unix.Write(w.stopfd, one[:])
	<-w.done
	w.closePoll()
}

// run is the worker loop: wait for kicks, backend readability or the poll
// timer, then run one queue's handler. A handler that hits its budget is
// queued again behind the other queue (vhost_poll_queue), so it resumes
// without a new kick and neither direction starves the other.
func (w *worker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sysmon.ResetThread() // the thread may have come from a VMM's slowed sysmon
	defer close(w.done)
	defer w.setBatch(false)          // back to normal before the thread returns to Go's pool
	defer threadname.Set(w.p.name)() // and its name given back, before Reset returns
	// The thread may have run other goroutines before: count from now.
	tid := int32(unix.Gettid())
	w.p.workerCPUStart.Store(schedstat.ThreadCPU(int(tid)))
	w.p.workerTid.Store(tid)
	defer func() {
		w.p.workerTid.Store(0)
		w.p.workerCPUDone.Add(schedstat.ThreadCPU(int(tid)) - w.p.workerCPUStart.Load())
	}()
	// The driver may have posted buffers before DRIVER_OK.
	w.enqueue(txQueue)
	w.enqueue(rxQueue)
	var events [8]unix.EpollEvent
	for {
		timeout := -1
		switch {
		case w.npending > 0:
			timeout = 0
		case w.busyPolling() && w.pollCanMove():
			// Let any thread that wants this CPU (a vCPU adding chains)
			// run first, then look at the tx ring and the backend again.
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			timeout = 0
			if w.d.capture != nil {
				w.d.capture.flush()
			}
			if w.txPolling {
				w.enqueue(txQueue)
			}
			if w.rxPolling {
				w.enqueue(rxQueue)
			}
		case w.txPolling && !w.throttled[txQueue]:
			w.enqueue(txQueue) // polling is over: a last look turns kicks back on
			timeout = 0
		case w.rxPolling && !w.throttled[rxQueue]:
			w.enqueue(rxQueue) // the same for rx buffers
			timeout = 0
		case w.d.capture != nil:
			w.d.capture.flush() // about to sleep: let the writer have the frames
		}
		n, err := unix.EpollWait(w.epfd, events[:], timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			w.fail(fmt.Errorf("net %s: epoll_wait: %v", w.d.cfg.Ifname, err))
			return
		}
		for _, ev := range events[:n] {
			switch int(ev.Fd) {
			case w.stopfd:
				return
			case w.kick[txQueue]:
				w.onKick(txQueue)
			case w.kick[rxQueue]:
				w.onKick(rxQueue)
			case w.fd:
				if w.txFull && ev.Events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
					w.txFull = false
					w.setBackendEvents()
					w.enqueue(txQueue)
				}
				if ev.Events&^unix.EPOLLOUT != 0 {
					if w.justUnprobed {
						// A frame after a lone one's run, before
						// anything else woke the worker: frames come
						// together, each run reads to the end.
						w.loneRx = false
					}
					w.enqueue(rxQueue)
				}
			case w.timerfd:
				drainFd(w.timerfd)
				w.polling = false
				w.enqueue(txQueue)
			case w.throttleFd:
				w.onThrottleTimer()
			case w.irqTimer:
				drainFd(w.irqTimer)
				if w.rxIrqHeld {
					w.rxIrqHeld = false
					w.signal(rxQueue)
				}
			}
		}
		w.justUnprobed = false
		if w.npending == 0 {
			continue
		}
		qi := w.pending[0]
		w.pending[0] = w.pending[1]
		w.npending--
		var requeue bool
		if qi == txQueue {
			requeue = w.handleTx()
		} else {
			requeue = w.handleRx()
		}
		if requeue {
			w.enqueue(qi)
		}
	}
}

func (w *worker) onKick(qi int) {
	// Traced before it is counted: whoever sees the count finds the event.
	if w.trace != nil {
		w.trace.event(queueName(qi), "kick")
	}
	w.p.counters[qi].kicks.Add(1)
	w.enqueue(qi)
}

// enqueue schedules a queue's handler once; a broken queue gets no work,
// nor a throttled one until its timer fires.
func (w *worker) enqueue(qi int) {
	if w.broken[qi] || w.throttled[qi] || qi == txQueue && w.txFull {
		return
	}
	for i := 0; i < w.npending; i++ {
		if w.pending[i] == qi {
			return
		}
	}
	w.pending[w.npending] = qi
	w.npending++
}

// breakQueue stops all work on a queue the guest broke and reports it.
func (w *worker) breakQueue(qi int, err error) {
	w.broken[qi] = true
	unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, w.kick[qi], nil)
	if qi == rxQueue {
		w.watchBackend(false)
	}
	w.fail(fmt.Errorf("net %s %s queue: %w", w.d.cfg.Ifname, queueName(qi), err))
}

// publish makes the used entries visible and interrupts the guest if it
// asked for it. With RxIrqGapUs, an rx interrupt due sooner than that
// after the last one is held and sent when the gap is over, covering
// whatever was published meanwhile: a flood then costs at most one
// interrupt per gap, while a frame that comes alone is signalled at once.
func (w *worker) publish(qi int) {
	q := w.q[qi]
	q.PublishUsed()
	if w.trace != nil {
		w.trace.event(queueName(qi), "used published")
	}
	if !q.NeedsInterrupt() || w.irq[qi] == nil {
		return
	}
	if gap := time.Duration(w.tuning.RxIrqGapUs) * time.Microsecond; qi == rxQueue && gap > 0 {
		if w.rxIrqHeld {
			return
		}
		if wait := gap - clock().Sub(w.lastRxIrq); wait > 0 {
			ts := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(wait))}
			if unix.TimerfdSettime(w.irqTimer, 0, &ts, nil) == nil {
				w.rxIrqHeld = true
				return
			}
		}
	}
	w.signal(qi)
}

// signal interrupts the guest for queue qi.
func (w *worker) signal(qi int) {
	// Count and trace first: a driver woken by the interrupt may read both.
	w.p.counters[qi].interrupts.Add(1)
	if w.trace != nil {
		w.trace.event(queueName(qi), "irq")
	}
	w.irq[qi].Trigger()
	if qi == rxQueue && w.tuning.RxIrqGapUs > 0 { // publish reads it only then
		w.lastRxIrq = clock()
	}
}

// watchBackend turns readability polling of the backend on or off; it is on
// only while the guest has rx buffers.
func (w *worker) watchBackend(on bool) {
	if w.tapWatched == on {
		return
	}
	w.tapWatched = on
	if !w.setBackendEvents() {
		w.tapWatched = !on
	}
}

// waitWritable has the worker wait, tx kicks off, until the backend, full,
// takes frames again. Where epoll cannot watch it, the poll timer looks
// again soon instead.
func (w *worker) waitWritable() {
	w.txFull = true
	if !w.setBackendEvents() {
		w.txFull = false
		w.armPoll(burstPollNs)
	}
}

// setBackendEvents watches the backend for what rx (readable, while the
// guest has buffers) and tx (writable, while it was full) wait for.
func (w *worker) setBackendEvents() bool {
	ev := unix.EpollEvent{Fd: int32(w.fd)}
	if w.tapWatched {
		ev.Events |= unix.EPOLLIN
	}
	if w.txFull {
		ev.Events |= unix.EPOLLOUT
	}
	return unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, w.fd, &ev) == nil
}

// dropBackend takes a backend whose peer is gone out of the epoll set:
// even unwatched, it would report EPOLLHUP forever.
func (w *worker) dropBackend() {
	unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, w.fd, nil)
	w.tapWatched = false
	if w.txFull { // what waited goes now: a write to a closed peer fails
		w.txFull = false
		w.enqueue(txQueue)
	}
	w.d.cfg.Log("net %s: the backend closed; rx stops", w.d.cfg.Ifname)
}

// moved notes a run of queue qi that moved pkts frames, for PollLone's
// answer times: a lone frame on a queue starts its clock, the other
// queue's next frame stops it. A guest that halts between interrupts
// answers a ping only after its vCPU wakes, which can take longer than
// PollUs (in a nested L1, always): a poll for its answer then only spins
// on a CPU the sender wants, and the answer needs its kick anyway. A
// guest that polls, or one on fast hardware, answers within the poll.
// Each direction keeps its own time: after the guest's answer to a ping
// (a lone tx frame) the next frame in is the next ping, which may be a
// second away and says nothing of how soon the guest answers. So lone
// frames on a queue poll only while that queue's frames are answered
// within PollUs (answersInPoll), as KVM's halt polling grows and shrinks
// with how soon a vCPU is woken.
func (w *worker) moved(qi, pkts int) {
	if pkts <= 0 || !w.tuning.PollLone {
		return
	}
	now := time.Now()
	if other := 1 - qi; !w.loneAt[other].IsZero() {
		// One answer that never came counts at most a few polls' worth,
		// so that fast answers bring polling back soon.
		d := min(now.Sub(w.loneAt[other]).Nanoseconds(), 4*int64(w.tuning.PollUs)*1000)
		w.answerNs[other] += (d - w.answerNs[other]) / 4
		w.loneAt[other] = time.Time{}
	}
	switch {
	case pkts >= max(w.tuning.NotifyThreshold, 1):
		w.loneAt[qi] = time.Time{} // a burst is no question waiting for its answer
	case w.loneAt[qi].IsZero():
		w.loneAt[qi] = now
	}
}

// answersInPoll reports whether lone frames on queue qi have been
// answered within PollUs, on average (moved).
func (w *worker) answersInPoll(qi int) bool {
	return w.answerNs[qi] < int64(w.tuning.PollUs)*1000
}

// sawWork starts busy polling after a run that moved a burst (pkts of
// NotifyThreshold or more) and extends it after any run that moved
// frames. Lone frames (a ping) start it only with PollLone, where the
// worker can keep off the vCPUs' CPUs; elsewhere they keep their kicks
// and wakeups, which on a shared CPU come sooner than the worker's next
// turn after a yield.
func (w *worker) sawWork(qi, pkts int) {
	if w.pollsAfter(qi, pkts) {
		w.pollUntil = clock().Add(time.Duration(w.tuning.PollUs) * time.Microsecond)
	}
}

// pollsAfter reports whether a run of queue qi that has moved pkts frames
// starts or extends busy polling (sawWork).
func (w *worker) pollsAfter(qi, pkts int) bool {
	return w.tuning.PollUs > 0 && pkts > 0 &&
		(pkts >= max(w.tuning.NotifyThreshold, 1) || w.busyPolling() || w.pollsLone(qi))
}

// pollTxToo, when an rx run that has moved pkts frames goes on to busy
// polling, has the poll take in the tx ring too, its kicks off, as vhost's
// busyloop does: a guest that answers what it got (a ping) adds the reply
// without an exit and without waking the worker. The run loop's last look
// turns the kicks back on.
func (w *worker) pollTxToo(pkts int) {
	if w.txPolling || w.txFull || w.throttled[txQueue] || w.broken[txQueue] || !w.pollsAfter(rxQueue, pkts) {
		return
	}
	w.q[txQueue].SuppressNotify()
	w.txPolling = true
}

// busyPolling reports whether the worker polls instead of sleeping. A poll
// that is over is forgotten, so that until a burst starts another the run
// loop and the handlers read no clock: a lone frame (a ping, a TCP ACK)
// went through several clock reads (time.Now is two vDSO calls), which in
// a nested L1 were about a tenth of the worker's CPU per ping.
func (w *worker) busyPolling() bool {
	if w.pollUntil.IsZero() {
		return false
	}
	if w.tuning.PollUs > 0 && clock().Before(w.pollUntil) {
		return true
	}
	w.pollUntil = time.Time{}
	return false
}

// pollCanMove reports whether a busy poll could move a frame: a queue
// that is throttled, broken or (tx) waiting for room in the backend waits
// for its timer, a reset or epoll, so with both
// in that state the worker sleeps instead of spinning out PollUs.
func (w *worker) pollCanMove() bool {
	idle := func(qi int) bool { return w.throttled[qi] || w.broken[qi] || qi == txQueue && w.txFull }
	return !idle(txQueue) || !idle(rxQueue)
}

// armPoll makes the worker look at the tx ring again soon.
func (w *worker) armPoll(ns int) {
	if w.polling {
		return
	}
	ts := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(ns))}
	if unix.TimerfdSettime(w.timerfd, 0, &ts, nil) == nil {
		w.polling = true
	}
}

func drainFd(fd int) {
	var buf [8]byte
	unix.Read(fd, buf[:])
}

func queueName(qi int) string {
	if qi == txQueue {
		return "tx"
	}
	return "rx"
}

// overWeight reports whether a run that moved pkts frames and bytes bytes
// used up its budget, and counts which budget it was.
func overWeight(c *queueCounters, pkts, bytes, wPkts, wBytes int) bool {
	if wBytes > 0 && bytes >= wBytes {
		c.budgetByteHits.Add(1)
		return true
	}
	if wPkts > 0 && pkts >= wPkts {
		c.budgetPktHits.Add(1)
		return true
	}
	return false
}

// fallBack swaps a frameIO that failed as a whole for one writev or readv
// per frame, for good; an io_uring is closed with one notice.
func (w *worker) fallBack(err error) {
	if _, ok := w.io.(*uringIO); ok {
		w.dropRing(err)
	}
	w.io = vectorIO{}
}

// dropRing closes the pair's io_uring after it failed.
func (w *worker) dropRing(err error) {
	d := w.d
	d.mu.Lock()
	first := w.p.ring != nil
	if first {
		w.p.ring.Close()
		w.p.ring = nil
	}
	w.p.io = IOWritev
	d.mu.Unlock()
	if first { // one notice per pair
		d.cfg.Log("net %s: io_uring failed (%v); one writev per frame from now on", d.cfg.Ifname, err)
	}
}

// txBurst, with WorkerBatch, runs the thread under SCHED_BATCH while tx's
// last run was a burst: then a kick does not preempt the vCPU that is
// adding frames.
func (w *worker) txBurst(burst bool) {
	if w.tuning.WorkerBatch {
		w.setBatch(burst)
	}
}

// rxBurst does the same after rx runs, but only where the worker and the
// vCPUs are pinned apart (apartFromVCPUs): there a frame from the backend
// then does not preempt the thread writing more (on a host, the sender),
// and the worker takes a bigger batch at its turn. Where it may land on a
// vCPU's CPU, the vCPU waits for those frames and a batch worker would
// wait for the vCPU's time slice to end, which cost rx most of its rate
// in the nested L1 (bench/HISTORY.md has the runs).
func (w *worker) rxBurst(burst bool) {
	if w.tuning.WorkerBatch && w.apartFromVCPUs() {
		w.setBatch(burst)
	}
}

// rxBurstBytes is how many bytes make an rx run a burst however few its
// frames: what NotifyThreshold frames of the MTU carry. With GUEST_TSO
// the backend hands a TCP stream over in frames of up to 64 KiB, a few
// per run, so a count of frames alone never saw that stream as a burst.
func (w *worker) rxBurstBytes() int {
	return max(w.tuning.NotifyThreshold, 1) * w.d.cfg.MTU
}

// setBatch switches the worker's thread between SCHED_BATCH and the
// normal policy.
func (w *worker) setBatch(on bool) {
	if w.batchOn == on {
		return
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	if on {
		attr.Policy = unix.SCHED_BATCH
	}
	if unix.SchedSetAttr(0, &attr, 0) == nil {
		w.batchOn = on
	}
}
