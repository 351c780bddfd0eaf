package virtionet

import "testing"

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
			for seq := range turns {
				r.peerWrite(r.txFrame(seq, 64))
				r.waitUsed(r.rx, 1, nil)
				if _, err := r.tx.AddChain([][]byte{r.txFrame(seq, 64)}, nil); err != nil {
					t.Fatal(err)
				}
				r.tx.Kick()
				r.peerRead()
				r.waitUsed(r.tx, 1, nil)
			}
			// The first turn has no answered lone frame before it.
			calls, unprobed := turns+1, turns-1
			if io == IOSendmmsg && tc.features != 0 {
				// recvmmsg into whole chains finds the end in the
				// same call as the frame: never a read to leave out.
				calls, unprobed = turns, 0
			}
			s := r.stats(rxQueue)
			if s.Frames != turns || s.Syscalls != uint64(calls) || s.Unprobed != uint64(unprobed) {
				t.Errorf("%d lone turns: rx %d frames in %d system calls, %d runs unprobed; want %d in %d, %d unprobed\n%s",
					turns, s.Frames, s.Syscalls, s.Unprobed, turns, calls, unprobed, tail(r.trace.String()))
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
