package virtionet

import (
	"bytes"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// A request/response turn (a lone small frame in, an answer out) costs
// rx one read, not two: once a lone frame has been answered, the next
// lone frame's run ends without the read after it that finds the
// backend empty, and the backend's readiness in epoll brings any frame
// that was there already. Frames that come together after such a run
// all arrive; the run that finds them reads to the end as before. Both
// rx paths: whole chains (no MRG_RXBUF) and chains lined up per frame.
func testRxLoneTurnReadsOnce(t *testing.T, io IOMode) {
	for _, tc := range []struct {
		name     string
		features uint64
	}{
		{"whole chains", FeatVersion1 | FeatMAC | FeatEventIdx},
		{"mergeable", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{io: io, features: tc.features})
			r.rx.AddRxBuffers(128, 2048)
			r.rx.EnableInterrupts()
			r.activate()
			const turns = 6
			var first QueueStats
			for seq := range turns {
				r.roundTrip(seq)
				if seq == 0 {
					// It has no answered lone frame before it (and the
					// worker's first run may have found nothing).
					first = r.stats(rxQueue)
				}
			}
			calls, unprobed := turns-1, turns-1
			if io == IOSendmmsg && tc.features != 0 {
				// recvmmsg into whole chains finds the end in the
				// same call as the frame: never a read to leave out.
				unprobed = 0
			}
			s := r.stats(rxQueue)
			if s.Frames != turns || s.Syscalls-first.Syscalls != uint64(calls) || s.Unprobed != uint64(unprobed) {
				t.Errorf("%d lone turns after the first: rx %d frames in %d system calls, %d runs unprobed; want %d in %d, %d unprobed\n%s",
					turns-1, s.Frames-first.Frames, s.Syscalls-first.Syscalls, s.Unprobed, turns-1, calls, unprobed, tail(r.trace.String()))
			}
			// A burst after an answered lone frame: its first frame's run
			// reads it alone, the next run reads the rest to the end.
			const burst = 5
			for i := range burst {
				r.peerWrite(r.txFrame(100+i, 64))
			}
			r.waitUsed(r.rx, burst, nil)
			if s := r.stats(rxQueue); s.Frames != turns+burst || len(s.Drops) > 0 {
				t.Errorf("after the burst: %d frames, drops %v; want %d, none", s.Frames, s.Drops, turns+burst)
			}
			if tc.features != 0 {
				return // no GUEST_TSO: no frame beyond the MTU
			}
			// A GSO frame is no lone frame: the run after its answer
			// reads on.
			r.peerWrite(r.txFrame(200, 3000))
			r.waitUsed(r.rx, 2, nil)
			before := r.stats(rxQueue)
			if _, err := r.tx.AddChain([][]byte{r.txFrame(200, 64)}, nil); err != nil {
				t.Fatal(err)
			}
			r.tx.Kick()
			r.peerRead()
			r.waitUsed(r.tx, 1, nil)
			r.peerWrite(r.txFrame(201, 64))
			r.waitUsed(r.rx, 1, nil)
			if s := r.stats(rxQueue); s.Unprobed != before.Unprobed {
				t.Errorf("a small frame after a 3000-byte one ran unprobed (%d, was %d)", s.Unprobed, before.Unprobed)
			}
		})
	}
}

// A frame that is there when the worker next looks after a lone frame's
// unprobed run ends the lone frames: the run that takes it reads to the
// end, though tx ran first and moved a frame between the two runs, as in
// a busy poll after a guest's tx burst (the poll queues tx ahead of what
// epoll reports), while ACKs come in for that burst.
func testRxFrameRightAfterUnprobedRunEndsLoneFrames(t *testing.T, io IOMode) {
	var armed atomic.Bool
	tuning := DefaultTuning()
	tuning.PollUs = 2_000_000 // the poll lasts the whole test
	r := newRig(t, rigOptions{io: io, tuning: tuning})
	r.trace.onLine = func(line []byte) {
		if !bytes.Contains(line, []byte(" rx unprobed")) || !armed.CompareAndSwap(true, false) {
			return
		}
		// On the worker's thread, inside the unprobed run: a tx chain
		// (the poll takes it without a kick) and a frame from the peer.
		if _, err := r.tx.AddChain([][]byte{r.txFrame(300, 64)}, nil); err != nil {
			t.Error(err)
		}
		if _, err := unix.Write(r.sp.Peer, r.txFrame(301, 64)); err != nil {
			t.Error(err)
		}
	}
	r.rx.AddRxBuffers(128, 2048)
	r.rx.EnableInterrupts()
	r.activate()
	// A tx burst starts the busy poll.
	const burst = 16
	r.txBurst(burst, 64)
	r.tx.Kick()
	r.drainPeer(burst)
	r.waitUsed(r.tx, burst, nil)
	r.roundTrip(0)
	r.roundTrip(1)
	before := r.stats(rxQueue)
	if before.Unprobed == 0 {
		t.Fatalf("no lone frame's run unprobed in the poll\n%s", tail(r.trace.String()))
	}
	armed.Store(true)
	r.peerWrite(r.txFrame(10, 64)) // read unprobed; the hook adds the rest
	r.waitUsed(r.rx, 2, nil)
	r.peerRead()
	r.waitUsed(r.tx, 1, nil)
	if s := r.stats(rxQueue); armed.Load() || s.Unprobed != before.Unprobed+1 || s.Frames != before.Frames+2 {
		t.Errorf("hook ran %v; %d runs unprobed, %d frames; want 1 and 2\n%s",
			!armed.Load(), s.Unprobed-before.Unprobed, s.Frames-before.Frames, tail(r.trace.String()))
	}
}
