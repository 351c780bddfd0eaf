package virtionet

import (
	"bytes"
	"testing"
	"time"

	"tinyvmm/ratelimit"
)

func TestConfigRejectsBadBuckets(t *testing.T) {
	for _, c := range []Config{
		{Ifname: "t0", RxLimit: ratelimit.Limit{Bytes: ratelimit.Bucket{Burst: 10}}},
		{Ifname: "t0", TxLimit: ratelimit.Limit{Frames: ratelimit.Bucket{Rate: ratelimit.MaxRate + 1}}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// collectPeer reads n frames from the backend's peer and returns them with
// the time each arrived.
func (r *rig) collectPeer(n int) (frames [][]byte, at []time.Time) {
	r.t.Helper()
	for range n {
		frames = append(frames, r.peerRead())
		at = append(at, time.Now())
	}
	return frames, at
}

// tx frames beyond the ops bucket's burst go at its rate, each whole and
// in order, and the throttling is counted.
func testTxFrameRateLimit(t *testing.T, io IOMode) {
	const n, burst, rate = 16, 4, 200 // 12 frames after the burst: ~60 ms
	r := newRig(t, rigOptions{io: io, txLimit: ratelimit.Limit{Frames: ratelimit.Bucket{Rate: rate, Burst: burst}}})
	r.activate()
	for i := range n {
		if _, err := r.tx.AddChain([][]byte{r.txFrame(i, 100)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	r.tx.Kick()
	frames, at := r.collectPeer(n)
	for i, f := range frames {
		if !bytes.Equal(f, r.txFrame(i, 100)) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if d := at[n-1].Sub(start); d < 50*time.Millisecond {
		t.Errorf("%d frames at %d/s with a burst of %d took %v; want at least ~60ms", n, rate, burst, d)
	}
	if d := at[burst-1].Sub(start); d > 40*time.Millisecond {
		t.Errorf("the burst took %v; want it at once", d)
	}
	r.waitUsed(r.tx, n, nil)
	if s := r.stats(txQueue); s.Throttled == 0 || s.Frames != n {
		t.Errorf("tx stats %+v: want %d frames and throttle events", s, n)
	}
	if c := r.trace.count("tx throttled"); c == 0 {
		t.Errorf("no throttle in the trace")
	}
}

// The bandwidth bucket: frames larger than what is left go into debt, so
// over the run the bytes go at the rate.
func testTxByteRateLimit(t *testing.T, io IOMode) {
	const n, size, rate, burst = 12, 1000, 100_000, 1000 // 11 KB after the burst: ~110 ms
	r := newRig(t, rigOptions{io: io, txLimit: ratelimit.Limit{Bytes: ratelimit.Bucket{Rate: rate, Burst: burst}}})
	r.activate()
	for i := range n {
		if _, err := r.tx.AddChain([][]byte{r.txFrame(i, size)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	r.tx.Kick()
	frames, at := r.collectPeer(n)
	for i, f := range frames {
		if !bytes.Equal(f, r.txFrame(i, size)) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if d := at[n-1].Sub(start); d < 95*time.Millisecond {
		t.Errorf("%d bytes at %d B/s with a burst of %d took %v; want at least ~110ms", n*size, rate, burst, d)
	}
	if s := r.stats(txQueue); s.Throttled == 0 {
		t.Errorf("tx stats %+v: no throttle events", s)
	}
}

// While rx is throttled the worker does not read the backend: at every
// moment the guest has no more frames than the bucket allowed, and the
// rest are still waiting in the backend, delivered later, in order.
func testRxThrottledDoesNotReadBackend(t *testing.T, io IOMode) {
	const n, burst, rate = 10, 2, 50
	r := newRig(t, rigOptions{io: io, rxLimit: ratelimit.Limit{Frames: ratelimit.Bucket{Rate: rate, Burst: burst}}})
	r.rx.AddRxBuffers(64, 2048)
	r.activate()
	r.rx.Kick()
	start := time.Now()
	for i := range n {
		r.peerWrite(r.txFrame(i, 200))
	}
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		for _, u := range r.rx.Used() {
			got = append(got, r.rx.ReadBuf(u, nil))
		}
		allowed := burst + int(time.Since(start).Seconds()*rate) + 1
		if len(got) > allowed {
			t.Fatalf("%d frames delivered %v after the start; the bucket allows %d", len(got), time.Since(start), allowed)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if len(got) != n {
		t.Fatalf("got %d frames, want %d", len(got), n)
	}
	for i, f := range got {
		if !bytes.Equal(f[12:], r.txFrame(i, 200)[12:]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Errorf("%d frames at %d/s with a burst of %d took %v; want ~160ms", n, rate, burst, d)
	}
	if s := r.stats(rxQueue); s.Throttled == 0 {
		t.Errorf("rx stats %+v: no throttle events", s)
	}
}

// Reset of a throttled device returns at once: the worker sleeps in
// epoll_wait, not in the limiter.
func testThrottledReset(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, txLimit: ratelimit.Limit{Frames: ratelimit.Bucket{Rate: 1, Burst: 1}}})
	r.activate()
	r.tx.AddChain([][]byte{r.txFrame(0, 64)}, nil)
	r.tx.AddChain([][]byte{r.txFrame(1, 64)}, nil)
	r.tx.Kick()
	r.peerRead()
	time.Sleep(20 * time.Millisecond) // the second waits for a token a second away
	start := time.Now()
	r.dev.Reset()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Reset of a throttled device took %v", d)
	}
	if s := r.stats(txQueue); s.Frames != 1 || s.Throttled == 0 {
		t.Errorf("tx stats %+v: want 1 frame and the throttle", s)
	}
}
