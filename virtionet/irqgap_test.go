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
	for _, gapUs := range []int{0, 50_000} {
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
		take()
		for i := 1; i <= 4; i++ {
			r.peerWrite(r.txFrame(i, 64))
			waitFor(t, "the frame in the used ring", func() bool { return int(r.rx.UsedIdx()) == i+1 })
			take()
		}
		time.Sleep(100 * time.Millisecond) // past the gap: a held interrupt has gone
		irqs := r.rx.Irq.Count()
		switch {
		case got != 5:
			t.Fatalf("gap %d us: %d frames arrived, want 5", gapUs, got)
		case gapUs == 0 && irqs != 5:
			t.Errorf("no gap: %d interrupts for 5 frames taken one by one, want 5", irqs)
		case gapUs > 0 && irqs != 2:
			t.Errorf("gap 50 ms: %d interrupts, want 2 (the first frame, then one for the other four)", irqs)
		}
		if s := r.stats(rxQueue); s.Interrupts != irqs {
			t.Errorf("gap %d us: stats count %d interrupts, the driver saw %d", gapUs, s.Interrupts, irqs)
		}
	}
}
