// Package ratelimit is the token bucket of the net device's rate limits,
// in the shape of Firecracker's rate limiter: per direction a bandwidth
// bucket (bytes) and an ops bucket (frames), each refilled at a rate up to
// its size. A Limiter only counts; sleeping until it has room is its
// user's business (virtionet's worker arms a timerfd).
package ratelimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
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

// Limit limits one direction: Bytes is Firecracker's bandwidth
// bucket (frame bytes, vnet header not counted), Frames its ops bucket.
type Limit struct {
	Bytes  Bucket `json:"bytes,omitzero"`
	Frames Bucket `json:"frames,omitzero"`
}

// On reports whether any bucket limits the direction.
func (l Limit) On() bool { return l.Bytes.Rate > 0 || l.Frames.Rate > 0 }

// MaxRate bounds a Rate or Burst: beyond it the float64 arithmetic of
// the bucket would lose whole tokens, and no link is that fast anyway.
const MaxRate = 1 << 50

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
	if n > MaxRate/mult {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return n * mult, nil
}

// Validate rejects a bucket the Limiter cannot run; what names it in the
// message ("rx-rate").
func (b Bucket) Validate(what string) error {
	if b.Rate > MaxRate || b.Burst > MaxRate {
		return fmt.Errorf("%s: rate and burst must be at most %d", what, uint64(MaxRate))
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

// minThrottle is the least sleep of a throttled queue that Room's wait
// asks for: it then wakes to at least this much traffic (or a full
// bucket), not to every frame.
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

// Limiter is one direction's buckets; a nil bucket is no limit.
type Limiter struct{ bytes, frames *bucket }

// New makes the limiter of l, its buckets full at now; nil when l limits
// nothing.
func New(l Limit, now time.Time) *Limiter {
	if !l.On() {
		return nil
	}
	return &Limiter{bytes: newBucket(l.Bytes, now), frames: newBucket(l.Frames, now)}
}

// Room is how many frames and bytes may go now; -1 is unlimited. Either
// being 0 means the direction is throttled for wait.
func (l *Limiter) Room(now time.Time) (frames, bytes int, wait time.Duration) {
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

// Charge takes a frame of n bytes that went.
func (l *Limiter) Charge(n int) {
	if l.frames != nil {
		l.frames.tokens--
	}
	if l.bytes != nil {
		l.bytes.tokens -= float64(n)
	}
}
