package virtionet

import (
	"testing"
	"time"
)

// Rx interrupt moderation: a frame that comes alone is signalled at once;
// frames that need an interrupt within RxIrqGapUs of the last one share
// one, sent when the gap is over. The driver re-arms used_event after each
// frame, as a NAPI driver does when it has caught up, so without the gap
// every frame would be an interrupt.
func testRxIrqGapCoalesces(t *testing.T, io IOMode) {
	// The gap is long against the few milliseconds the four frames take,
	// even on a loaded machine, and the test waits for the held interrupt
	// instead of sleeping a fixed time past the gap.
	const gap = time.Second
	for _, gapUs := range []int{0, int(gap / time.Microsecond)} {
		tun := DefaultTuning()
		tun.RxIrqGapUs = gapUs
		r := newRig(t, rigOptions{io: io, tuning: tun})
		r.rx.AddRxBuffers(64, 2048)
		r.rx.EnableInterrupts()
		r.activate()
		got := 0
		take := func() {
			got += len(r.rx.Used())
			r.rx.EnableInterrupts()
		}
		r.peerWrite(r.txFrame(0, 64))
		if !r.rx.Irq.Wait(time.Second) {
			t.Fatalf("gap %d us: the first frame was not signalled at once", gapUs)
		}
		first := time.Now()
		take()
		for i := 1; i <= 4; i++ {
			r.peerWrite(r.txFrame(i, 64))
			waitFor(t, "the frame in the used ring", func() bool { return int(r.rx.UsedIdx()) == i+1 })
			take()
		}
		if got != 5 {
			t.Fatalf("gap %d us: %d frames arrived, want 5", gapUs, got)
		}
		if gapUs == 0 {
			waitFor(t, "an interrupt per frame", func() bool { return r.rx.Irq.Count() >= 5 })
			if irqs := r.rx.Irq.Count(); irqs != 5 {
				t.Errorf("no gap: %d interrupts for 5 frames taken one by one, want 5", irqs)
			}
		} else {
			if within := time.Since(first); within < gap {
				if irqs := r.rx.Irq.Count(); irqs != 1 {
					t.Errorf("gap %v: %d interrupts %v after the first, want that one only (the rest held)", gap, irqs, within.Round(time.Millisecond))
				}
			}
			deadline := time.Now().Add(gap + 3*time.Second)
			for r.rx.Irq.Count() < 2 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if irqs := r.rx.Irq.Count(); irqs != 2 {
				t.Errorf("gap %v: %d interrupts, want 2 (the first frame, then one for the other four)", gap, irqs)
			}
		}
		if s := r.stats(rxQueue); s.Interrupts != r.rx.Irq.Count() {
			t.Errorf("gap %d us: stats count %d interrupts, the driver saw %d", gapUs, s.Interrupts, r.rx.Irq.Count())
		}
	}
}
