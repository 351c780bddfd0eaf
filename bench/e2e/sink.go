package e2e

import (
	"sync/atomic"
	"time"
)

// SinkResult is what a sink saw: bench frames checked one by one, with the
// host's clock around the first and last good frame.
type SinkResult struct {
	seqCounter
	First, Last time.Time
	// SocketDrops are frames the sink itself could not keep up with.
	SocketDrops uint64
	Err         error
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
	done chan SinkResult
}

// sinkMaxLife bounds a sink that nobody stops.
const sinkMaxLife = 10 * time.Minute

// StartSink opens an AF_PACKET socket on the namespace's tap and counts
// frames until Stop.
func StartSink(ns *Namespace) (*Sink, error) {
	var sock *packetSocket
	if err := ns.Do(func() (err error) {
		sock, err = openPacketSocket(TapName, true)
		return err
	}); err != nil {
		return nil, err
	}
	k := &Sink{done: make(chan SinkResult, 1)}
	go func() {
		defer sock.Close()
		var r SinkResult
		begin := time.Now()
		for !k.stop.Load() && time.Since(begin) < sinkMaxLife {
			frames, err := sock.recv()
			if err != nil {
				r.Err = err
				break
			}
			now := time.Now()
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
		r.SocketDrops = sock.drops()
		k.done <- r
	}()
	return k, nil
}

// Stop ends the count (within the socket's 100 ms timeout) and returns it.
func (k *Sink) Stop() SinkResult {
	k.stop.Store(true)
	return <-k.done
}
