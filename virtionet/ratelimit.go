package virtionet

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bucket is one token bucket, in the shape of Firecracker's TokenBucket:
// it holds at most Burst tokens (Firecracker's size) and refills at Rate
// tokens per second (size / refill_time). It starts full.
type Bucket struct {
	// Rate is tokens per second; 0 means no limit.
	Rate uint64 `json:"rate,omitempty"`
	// Burst is the bucket's size: what may go at once after a pause.
	// 0 means a tenth of a second at Rate (at least one token).
	Burst uint64 `json:"burst,omitempty"`
}

// RateLimit limits one direction: Bytes is Firecracker's bandwidth
// bucket (frame bytes, vnet header not counted), Frames its ops bucket.
type RateLimit struct {
	Bytes  Bucket `json:"bytes,omitzero"`
	Frames Bucket `json:"frames,omitzero"`
}

// On reports whether any bucket limits the direction.
func (l RateLimit) On() bool { return l.Bytes.Rate > 0 || l.Frames.Rate > 0 }

// maxRate bounds a Rate or Burst: beyond it the float64 arithmetic of
// the bucket would lose whole tokens, and no link is that fast anyway.
const maxRate = 1 << 50

// ParseBucket parses --net's rx-rate=, tx-rate=, rx-pps= and tx-pps=
// values: RATE[/s][:BURST], each a number with an optional K, M or G
// (powers of 1000) or Ki, Mi or Gi (powers of 1024) suffix.
func ParseBucket(s string) (Bucket, error) {
	rate, burst, hasBurst := strings.Cut(s, ":")
	rate = strings.TrimSuffix(rate, "/s")
	var b Bucket
	var err error
	if b.Rate, err = parseCount(rate); err != nil || b.Rate == 0 {
		return b, fmt.Errorf("rate %q is not a positive number (like 10M/s or 10M/s:64Ki)", s)
	}
	if hasBurst {
		if b.Burst, err = parseCount(burst); err != nil || b.Burst == 0 {
			return b, fmt.Errorf("burst %q is not a positive number (like 10M/s:64Ki)", burst)
		}
	}
	return b, nil
}

// parseCount is a number with an optional SI or binary suffix.
func parseCount(s string) (uint64, error) {
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}} {
		if t, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = t, u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > maxRate/mult {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return n * mult, nil
}

// validate rejects a bucket the limiter cannot run.
func (b Bucket) validate(what string) error {
	if b.Rate > maxRate || b.Burst > maxRate {
		return fmt.Errorf("%s: rate and burst must be at most %d", what, uint64(maxRate))
	}
	if b.Rate == 0 && b.Burst > 0 {
		return fmt.Errorf("%s: a burst needs a rate", what)
	}
	return nil
}

// bucket is a Bucket at run time. Tokens may go below zero: a frame goes
// while any token is left and is charged in full afterwards (rx learns a
// frame's size only once it is read), and the debt delays the next frame,
// so over time exactly Rate tokens go per second.
type bucket struct {
	rate, size, tokens float64
	last               time.Time
}

func newBucket(b Bucket, now time.Time) *bucket {
	if b.Rate == 0 {
		return nil
	}
	size := float64(b.Burst)
	if size == 0 {
		size = max(float64(b.Rate)/10, 1)
	}
	return &bucket{rate: float64(b.Rate), size: size, tokens: size, last: now}
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.size, b.tokens+dt.Seconds()*b.rate)
		b.last = now
	}
}

// minThrottle is the least sleep of a throttled queue: it then wakes to
// at least this much traffic (or a full bucket), not to every frame.
const minThrottle = time.Millisecond

// wait is how long until the bucket holds need tokens, or is full, or
// minThrottle's worth: whichever is least, and 0 if it holds them now.
func (b *bucket) wait(need float64) time.Duration {
	target := min(b.size, max(need, b.rate*minThrottle.Seconds()))
	if b.tokens >= need {
		return 0
	}
	return time.Duration(math.Ceil((target - b.tokens) / b.rate * 1e9))
}

// limiter is one direction's buckets; a nil bucket is no limit.
type limiter struct{ bytes, frames *bucket }

func newLimiter(l RateLimit, now time.Time) *limiter {
	if !l.On() {
		return nil
	}
	return &limiter{bytes: newBucket(l.Bytes, now), frames: newBucket(l.Frames, now)}
}

// room is how many frames and bytes may go now; -1 is unlimited. Either
// being 0 means the direction is throttled for wait.
func (l *limiter) room(now time.Time) (frames, bytes int, wait time.Duration) {
	frames, bytes = -1, -1
	if b := l.frames; b != nil {
		b.refill(now)
		frames = int(max(b.tokens, 0))
		wait = b.wait(1)
	}
	if b := l.bytes; b != nil {
		b.refill(now)
		bytes = int(math.Ceil(max(b.tokens, 0)))
		wait = max(wait, b.wait(math.SmallestNonzeroFloat64))
	}
	return frames, bytes, wait
}

// charge takes a frame of n bytes that went.
func (l *limiter) charge(n int) {
	if l.frames != nil {
		l.frames.tokens--
	}
	if l.bytes != nil {
		l.bytes.tokens -= float64(n)
	}
}

// The worker's side: a throttled queue is not run (enqueue skips it) and
// rx does not watch the backend, until the throttle timerfd fires.

// rateRoom bounds a run's next group of frames by qi's buckets. It returns
// 0 frames, after throttling the queue, when a bucket is empty.
func (w *worker) rateRoom(qi, frames, bytes int) (int, int) {
	l := w.d.limits[qi]
	if l == nil {
		return frames, bytes
	}
	f, b, wait := l.room(time.Now())
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
		f, b, _ := l.room(time.Now())
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
