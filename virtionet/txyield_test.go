package virtionet

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// A frame for the guest that arrives while a tx run is sending a burst
// waits for that run to end. Under vhost-net's rule (TxYieldPkts 0) it
// waits for the whole burst, up to the weight; with TxYieldPkts the run
// gives rx its turn at its next look. The frame is written from inside
// the run (the trace hook, on the worker's thread, at its first pop), so
// the count of pops before rx is exact, not a matter of timing.
func TestTxRunYieldsToWaitingRx(t *testing.T) {
	const burst = 200
	for _, c := range []struct{ yield, maxPops int }{{0, burst}, {DefaultTxYieldPkts, DefaultTxYieldPkts}, {8, 8}} {
		t.Run(fmt.Sprint("TxYieldPkts=", c.yield), func(t *testing.T) {
			tun := DefaultTuning()
			tun.PollUs, tun.TxYieldPkts = 0, c.yield
			r := newRig(t, rigOptions{tuning: tun})
			var armed, written atomic.Bool
			var pops, popsBeforeRx atomic.Int64
			popsBeforeRx.Store(-1)
			r.trace.onLine = func(line []byte) {
				if !armed.Load() {
					return
				}
				switch {
				case bytes.Contains(line, []byte(" tx pop ")):
					pops.Add(1)
					if !written.Swap(true) {
						unix.Write(r.sp.Peer, r.txFrame(1, 60)[r.hdrLen():])
					}
				case bytes.Contains(line, []byte(" rx batch ")) && written.Load() && popsBeforeRx.Load() < 0:
					popsBeforeRx.Store(pops.Load())
				}
			}
			r.activate()
			// One frame in first: the guest has rx buffers and the worker
			// watches the backend, as in a guest that is up.
			r.rx.AddRxBuffers(64, 2048)
			r.rx.Kick()
			r.peerWrite(r.txFrame(0, 60)[r.hdrLen():])
			r.waitUsed(r.rx, 1, nil)

			armed.Store(true)
			r.txBurst(burst, 60)
			r.tx.Kick()
			drained := make(chan struct{})
			go func() { // keep the peer's socket from filling
				defer close(drained)
				buf := make([]byte, 2048)
				fds := []unix.PollFd{{Fd: int32(r.sp.Peer), Events: unix.POLLIN}}
				for got := 0; got < burst; {
					// A poll with a timeout, not a bare read: a read
					// blocked on a socket outlives its close.
					if n, _ := unix.Poll(fds, 2000); n <= 0 {
						return
					}
					if _, err := unix.Read(r.sp.Peer, buf); err != nil {
						return
					}
					got++
				}
			}()
			r.waitUsed(r.rx, 1, nil)
			r.waitUsed(r.tx, burst, nil)
			<-drained
			got := popsBeforeRx.Load()
			if got < 1 || got > int64(c.maxPops) || (c.yield == 0 && got != burst) {
				t.Errorf("the frame for the guest waited for %d tx pops, want %d at most (all %d under vhost's rule)\n%s",
					got, c.maxPops, burst, tail(r.trace.String()))
			}
			if y := r.stats(txQueue).RxYields; (y > 0) != (c.yield > 0) {
				t.Errorf("RxYields %d with TxYieldPkts %d", y, c.yield)
			}
			if !strings.Contains(r.dev.Stats().String(), "gave rx its turn early") == (c.yield > 0) {
				t.Errorf("--stats does not say the run yielded:\n%s", r.dev.Stats())
			}
		})
	}
}
