package e2e

import (
	"sync"
	"testing"
	"time"
)

// lateSource hands its frames out only after the sink was told to stop,
// as a loaded host's backlog or socket does when the sink's goroutine or
// the softirq ran late: the frames were sent, and are on their way.
type lateSource struct {
	mu      sync.Mutex
	pending [][]byte
	release <-chan struct{}
	dropped uint64
}

func (s *lateSource) recv() ([][]byte, error) {
	select {
	case <-s.release:
	default:
		time.Sleep(time.Millisecond)
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(s.pending), packetBatch)
	if n == 0 {
		time.Sleep(10 * time.Millisecond) // the socket's receive timeout
		return nil, nil
	}
	out := s.pending[:n]
	s.pending = s.pending[n:]
	return out, nil
}

func (s *lateSource) drops() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dropped
	s.dropped = 0 // as PACKET_STATISTICS does
	return d
}

func (s *lateSource) Close() error { return nil }

func benchFrames(n int) [][]byte {
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = make([]byte, 64)
		BuildFrame(frames[i], uint64(i), CeilingMAC, SinkMAC, GuestIP, HostIP)
	}
	return frames
}

// TestSinkCountsFramesStillQueuedAtStop: frames that the sender finished
// with but that reach the sink only after the count was to end are counted,
// not lost (TestCeiling lost 0.5-1.3% of its frames on a loaded host when
// the sink stopped a fixed 200 ms after the sender).
func TestSinkCountsFramesStillQueuedAtStop(t *testing.T) {
	release := make(chan struct{})
	src := &lateSource{pending: benchFrames(1000), release: release, dropped: 24}
	k := startSink(src)
	time.Sleep(20 * time.Millisecond)
	go func() {
		time.Sleep(50 * time.Millisecond) // the stop comes first
		close(release)
	}()
	start := time.Now()
	got := k.StopAfter(1024, 5*time.Second)
	if got.Good != 1000 || got.SocketDrops != 24 || got.Lost != 0 {
		t.Errorf("sink counted %d good, %d socket drops, %d lost; want 1000, 24, 0", got.Good, got.SocketDrops, got.Lost)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the sink took %v to stop with every frame counted; it should stop when the count is complete", d)
	}
}

// TestSinkStopsAfterQuiet: frames that never come (lost on the way) end
// the count after the quiet time, with what did come.
func TestSinkStopsAfterQuiet(t *testing.T) {
	release := make(chan struct{})
	close(release)
	src := &lateSource{pending: benchFrames(100), release: release}
	k := startSink(src)
	start := time.Now()
	got := k.StopAfter(200, 300*time.Millisecond)
	d := time.Since(start)
	if got.Good != 100 {
		t.Errorf("sink counted %d good frames, want 100", got.Good)
	}
	if d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("the sink stopped %v after StopAfter, want the quiet time (300ms) and not much more", d)
	}
}

// TestSinkStopNow: Stop ends the count without waiting for anything.
func TestSinkStopNow(t *testing.T) {
	src := &lateSource{pending: benchFrames(10), release: make(chan struct{})}
	k := startSink(src)
	start := time.Now()
	got := k.Stop()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Stop took %v", d)
	}
	if got.Good != 0 {
		t.Errorf("sink counted %d frames it never received", got.Good)
	}
}
