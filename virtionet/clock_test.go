package virtionet

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"tinyvmm/internal/schedstat"
)

// TestLoneFramesReadNoClock: a ping (a lone frame in, its answer out)
// reads no clock in the worker, also once a burst's busy poll is over;
// the burst itself polls, which reads it.
func TestLoneFramesReadNoClock(t *testing.T) {
	var reads atomic.Int64
	clock = func() time.Time { reads.Add(1); return time.Now() }
	t.Cleanup(func() { clock = time.Now })
	for _, io := range rigIOs {
		t.Run(string(io), func(t *testing.T) {
			skipUnlessIO(t, io)
			r := newRig(t, rigOptions{io: io})
			r.rx.AddRxBuffers(128, 2048)
			r.rx.EnableInterrupts()
			r.activate()
			seq := 0
			ping := func(what string) {
				t.Helper()
				reads.Store(0)
				for range 3 {
					seq++
					r.roundTrip(seq)
				}
				if n := reads.Load(); n != 0 {
					t.Errorf("%s: the worker read the clock %d times for 3 pings, want 0", what, n)
				}
			}
			ping("lone frames")
			// A burst (more than NotifyThreshold frames in one run: all
			// in the ring before the kick) starts a busy poll.
			time.Sleep(50 * time.Millisecond) // the worker is done with the last ping
			reads.Store(0)
			const burst = 32
			r.txBurst(burst, 64)
			r.tx.Kick()
			r.drainPeer(burst)
			r.waitUsed(r.tx, burst, nil)
			// The worker starts the poll just after it publishes.
			waitFor(t, "a burst's busy poll to read the clock", func() bool { return reads.Load() > 0 })
			// Let the poll (PollUs) run out and the worker fall asleep
			// (a busy poll never sleeps: its epoll_wait does not wait),
			// so that the poll's last look at the clock, the one that
			// finds it over, is not counted for the pings.
			time.Sleep(time.Duration(10*DefaultTuning().PollUs)*time.Microsecond + 20*time.Millisecond)
			tid := workerThread(t, r)
			waitFor(t, "the worker asleep after its poll", func() bool {
				th, err := schedstat.ReadThread(fmt.Sprintf("/proc/self/task/%d", tid))
				return err == nil && th.State == "S"
			})
			ping("lone frames after a burst's poll")
		})
	}
}
