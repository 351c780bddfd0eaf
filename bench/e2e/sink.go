package e2e

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/schedstat"
)

// SinkResult is what a sink saw: bench frames checked one by one, with the
// host's clock around the first and last good frame.
type SinkResult struct {
	seqCounter
	First, Last time.Time
	// SocketDrops are frames the sink itself could not keep up with.
	SocketDrops uint64
	// Thread is the sink's own thread over the count: its CPU, its wait
	// for one (a sink that falls behind drops), its policy at the end.
	Thread schedstat.Thread
	Err    error
}

// PPS is the good frames per second between the first and the last.
func (r SinkResult) PPS() float64 {
	d := r.Last.Sub(r.First).Seconds()
	if r.Good < 2 || d <= 0 {
		return 0
	}
	return float64(r.Good-1) / d
}

// Sink counts the bench frames that reach the host side of the tap.
type Sink struct {
	stop atomic.Bool
	// want, once stop is set, is how many frames the sink still waits
	// for (good ones and its socket's drops): 0 stops at once.
	want  atomic.Uint64
	quiet time.Duration
	done  chan SinkResult
}

// sinkMaxLife bounds a sink that nobody stops.
const sinkMaxLife = 10 * time.Minute

// StartSink opens a packet ring on the namespace's tap and counts
// frames until Stop.
func StartSink(ns *Namespace) (*Sink, error) {
	var sock *packetRing
	if err := ns.Do(func() (err error) {
		sock, err = openPacketRing(TapName)
		return err
	}); err != nil {
		return nil, err
	}
	return startSink(sock), nil
}

// frameSource is what a sink reads: a packet socket, or a test's fake.
type frameSource interface {
	// recv returns the frames that came, or none after a short wait.
	recv() ([][]byte, error)
	// drops returns the frames lost to a full queue since the last call.
	drops() uint64
	Close() error
}

func startSink(sock frameSource) *Sink {
	k := &Sink{done: make(chan SinkResult, 1)}
	go func() {
		defer sock.Close()
		var r SinkResult
		// A thread of its own, so its schedstat is the sink's alone; it
		// ends with the sink (never unlocked).
		runtime.LockOSThread()
		task := "/proc/self/task/" + strconv.Itoa(unix.Gettid())
		t0, _ := schedstat.ReadThread(task)
		defer func() {
			t1, _ := schedstat.ReadThread(task)
			r.Thread = t1
			r.Thread.RunNs, r.Thread.WaitNs = t1.RunNs-t0.RunNs, t1.WaitNs-t0.WaitNs
			r.Thread.Voluntary, r.Thread.Involuntary = t1.Voluntary-t0.Voluntary, t1.Involuntary-t0.Involuntary
			k.done <- r
		}()
		begin := time.Now()
		var stopSeen, lastFrame time.Time
		empty := false // the last recv found nothing within its timeout
		for time.Since(begin) < sinkMaxLife {
			if k.stop.Load() {
				if stopSeen.IsZero() {
					stopSeen = time.Now()
				}
				r.SocketDrops += sock.drops() // reading the statistics resets them
				// Quiet counts from the stop at the earliest, and only after
				// a receive that waited and found nothing: a sink that was
				// itself kept off the CPU has not seen a silence.
				quietSince := stopSeen
				if lastFrame.After(quietSince) {
					quietSince = lastFrame
				}
				if r.Good+r.Bad+r.SocketDrops >= k.want.Load() || empty && time.Since(quietSince) >= k.quiet {
					break
				}
			}
			frames, err := sock.recv()
			if err != nil {
				r.Err = err
				break
			}
			now := time.Now()
			empty = len(frames) == 0
			if !empty {
				lastFrame = now
			}
			for _, f := range frames {
				before := r.Good
				r.add(f)
				if r.Good > before {
					if before == 0 {
						r.First = now
					}
					r.Last = now
				}
			}
		}
		r.SocketDrops += sock.drops()
	}()
	return k
}

// Stop ends the count (within the socket's 100 ms timeout) and returns it.
func (k *Sink) Stop() SinkResult {
	k.stop.Store(true)
	return <-k.done
}

// StopAfter ends the count once want frames have arrived (or were dropped
// by the sink's socket), or when no frame has come for quiet. Frames the
// sender finished with can still be queued in the host's backlog or the
// socket: on a loaded host the softirq or this goroutine runs late, and a
// count cut off at a fixed delay after the sender ends misses them.
func (k *Sink) StopAfter(want uint64, quiet time.Duration) SinkResult {
	k.want.Store(want)
	k.quiet = quiet
	k.stop.Store(true)
	return <-k.done
}
