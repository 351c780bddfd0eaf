package virtionet

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// The worker's side of the rate limits (the token buckets are package
// ratelimit): a throttled queue is not run (enqueue skips it) and rx does
// not watch the backend, until the throttle timerfd fires.

// throttleState is the worker's part of the rate limiter: a throttled
// queue is not run until throttleFd fires at its throttleAt.
type throttleState struct {
	throttleFd int
	throttled  [2]bool
	throttleAt [2]time.Time
}

// rateRoom bounds a run's next group of frames by qi's buckets. It returns
// 0 frames, after throttling the queue, when a bucket is empty.
func (w *worker) rateRoom(qi, frames, bytes int) (int, int) {
	l := w.d.limits[qi]
	if l == nil {
		return frames, bytes
	}
	f, b, wait := l.Room(time.Now())
	if f == 0 || b == 0 {
		w.throttle(qi, wait)
		return 0, 0
	}
	if f > 0 {
		frames = min(frames, f)
	}
	if b > 0 && (bytes == 0 || b < bytes) {
		bytes = b
	}
	return frames, bytes
}

// rxRateLimit bounds an rx batch: as many frames as the frame bucket has
// tokens and the byte bucket has room for at the MTU (rx learns a frame's
// size only once it is read). It is at least 1: handleRx ran rateRoom.
func (w *worker) rxRateLimit(limit int) int {
	if l := w.d.limits[rxQueue]; l != nil {
		f, b, _ := l.Room(time.Now())
		if f >= 0 {
			limit = min(limit, f)
		}
		if b >= 0 {
			per := w.d.cfg.MTU + ethHeaderLen
			limit = min(limit, (b+per-1)/per)
		}
	}
	return max(limit, 1)
}

// rxThrottled reports whether rx must wait for its buckets; the backend is
// then not watched, so a flood cannot wake the worker.
func (w *worker) rxThrottled() bool {
	if w.d.limits[rxQueue] == nil {
		return false
	}
	if f, _ := w.rateRoom(rxQueue, 1, 0); f > 0 {
		return false
	}
	w.watchBackend(false)
	return true
}

// throttle parks queue qi for wait and counts it.
func (w *worker) throttle(qi int, wait time.Duration) {
	w.throttled[qi] = true
	w.throttleAt[qi] = time.Now().Add(max(wait, time.Microsecond))
	w.p.counters[qi].throttles.Add(1)
	if w.trace != nil {
		w.trace.event(queueName(qi), "throttled", "us", int(wait.Microseconds()))
	}
	w.armThrottle()
}

// armThrottle sets the throttle timer to the earliest throttled queue.
func (w *worker) armThrottle() {
	var at time.Time
	for qi, on := range w.throttled {
		if on && (at.IsZero() || w.throttleAt[qi].Before(at)) {
			at = w.throttleAt[qi]
		}
	}
	ts := unix.ItimerSpec{} // disarms when nothing is throttled
	if !at.IsZero() {
		ts.Value = unix.NsecToTimespec(max(int64(time.Until(at)), 1))
	}
	unix.TimerfdSettime(w.throttleFd, 0, &ts, nil)
}

// onThrottleTimer runs the queues whose time has come.
func (w *worker) onThrottleTimer() {
	drainFd(w.throttleFd)
	now := time.Now()
	for qi, on := range w.throttled {
		if on && !now.Before(w.throttleAt[qi]) {
			w.throttled[qi] = false
			w.enqueue(qi)
		}
	}
	w.armThrottle()
}

// openThrottle creates the throttle timer when a direction is limited.
func (w *worker) openThrottle() error {
	if w.d.limits[rxQueue] == nil && w.d.limits[txQueue] == nil {
		return nil
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("timerfd: %v", err)
	}
	w.throttleFd = fd
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll add fd %d: %v", fd, err)
	}
	return nil
}
