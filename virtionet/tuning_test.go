package virtionet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"tinyvmm/virtio/virtiotest"
)

// drainPeer reads frames the device sends until n arrived.
func (r *rig) drainPeer(n int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		r.peerRead()
	}
}

// txBurst posts n tx chains of payload bytes each, without kicking.
func (r *rig) txBurst(n, payload int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		if _, err := r.tx.AddChain([][]byte{r.txFrame(i, payload)}, nil); err != nil {
			r.t.Fatal(err)
		}
	}
}

func testTxPacketBudgetStopsRunAtExactlyN(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.TxWeightPkts = 10
	r := newRig(t, rigOptions{io: io, tuning: tun})
	r.txBurst(25, 60) // posted before DRIVER_OK: the device starts on its own
	r.activate()
	r.drainPeer(25)
	r.waitUsed(r.tx, 25, nil)
	if n := r.trace.count("tx budget pkts=10 "); n != 2 {
		t.Errorf("%d runs stopped at 10 packets, want 2\n%s", n, tail(r.trace.String()))
	}
	s := r.stats(txQueue)
	if s.BudgetPktHits != 2 || s.BudgetByteHits != 0 {
		t.Errorf("budget hits %d pkts / %d bytes, want 2 / 0", s.BudgetPktHits, s.BudgetByteHits)
	}
	// A requeued queue resumed without any kick.
	if s.Kicks != 0 {
		t.Errorf("%d kicks, want none", s.Kicks)
	}
}

func testTxByteBudgetStopsRunAtExactlyB(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.TxWeightBytes = 1000
	r := newRig(t, rigOptions{io: io, tuning: tun})
	r.txBurst(25, 100)
	r.activate()
	r.drainPeer(25)
	r.waitUsed(r.tx, 25, nil)
	if n := r.trace.count("tx budget pkts=10 bytes=1000"); n != 2 {
		t.Errorf("%d runs stopped at 1000 bytes, want 2\n%s", n, tail(r.trace.String()))
	}
	if s := r.stats(txQueue); s.BudgetByteHits != 2 {
		t.Errorf("byte budget hits %d, want 2", s.BudgetByteHits)
	}
}

// TxWeightPkts=0 is vhost-net before VHOST_NET_PKT_WEIGHT (the "Origin" row
// of experiment 002): one run takes everything.
func testTxUnlimitedWeightIsOneRun(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.TxWeightPkts, tun.TxWeightBytes = 0, 0
	r := newRig(t, rigOptions{io: io, tuning: tun})
	r.txBurst(200, 60)
	r.activate()
	r.drainPeer(200)
	r.waitUsed(r.tx, 200, nil)
	if s := r.stats(txQueue); s.BudgetPktHits+s.BudgetByteHits != 0 {
		t.Errorf("unlimited weight hit a budget: %+v", s)
	}
	if n := r.trace.count("tx budget"); n != 0 {
		t.Errorf("%d budget events", n)
	}
}

// A budget-limited tx run is requeued behind rx: rx frames are delivered
// between tx runs, not after the whole tx burst.
func testTxBudgetRequeuesBehindRx(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.TxWeightPkts = 4
	r := newRig(t, rigOptions{io: io, tuning: tun})
	r.rx.AddRxBuffers(64, 2048)
	r.txBurst(40, 60)
	for i := 0; i < 3; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	r.activate()
	r.drainPeer(40)
	r.waitUsed(r.tx, 40, nil)
	r.waitUsed(r.rx, 3, nil)
	lines := r.trace.String()
	firstRx := strings.Index(lines, "rx batch")
	lastTx := strings.LastIndex(lines, "tx budget")
	if firstRx < 0 || lastTx < 0 || firstRx > lastTx {
		t.Errorf("rx did not run between tx runs:\n%s", tail(lines))
	}
}

func testRxPacketBudgetRequeues(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.RxWeightPkts, tun.RxBatch = 5, 64
	r := newRig(t, rigOptions{io: io, tuning: tun})
	r.rx.AddRxBuffers(64, 2048)
	for i := 0; i < 12; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	r.activate()
	r.waitUsed(r.rx, 12, nil)
	if n := r.trace.count("rx budget pkts=5 "); n != 2 {
		t.Errorf("%d rx runs stopped at 5 packets, want 2\n%s", n, tail(r.trace.String()))
	}
	if s := r.stats(rxQueue); s.BudgetPktHits != 2 || s.Kicks != 0 {
		t.Errorf("rx stats %+v", s)
	}
}

// One rx batch: one publish of the used index and one interrupt for all
// frames waiting.
func testRxBatchPublishesOnceAndSignalsOnce(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, features: allBut(FeatEventIdx)})
	r.rx.AddRxBuffers(64, 2048)
	for i := 0; i < 10; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	r.activate()
	r.waitUsed(r.rx, 10, nil)
	// The worker signals after it publishes: the used index can show
	// before the interrupt has been counted.
	waitFor(t, "the batch's interrupt", func() bool { return r.rx.Irq.Count() >= 1 })
	if n := r.trace.count("rx used published"); n != 1 {
		t.Errorf("%d publishes, want 1\n%s", n, r.trace.String())
	}
	if n := r.rx.Irq.Count(); n != 1 {
		t.Errorf("%d interrupts, want 1", n)
	}
	if b := r.stats(rxQueue).Batches; b["8-15"] != 1 || len(b) != 1 {
		t.Errorf("batch histogram %v, want one batch of 8-15", b)
	}
}

// RxBatch=1 is the "before" row: a publish and an interrupt per frame.
func testRxBatchOneIsPerFrame(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.RxBatch = 1
	r := newRig(t, rigOptions{io: io, tuning: tun, features: allBut(FeatEventIdx)})
	r.rx.AddRxBuffers(64, 2048)
	for i := 0; i < 10; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	r.activate()
	r.waitUsed(r.rx, 10, nil)
	waitFor(t, "the last frame's interrupt", func() bool { return r.rx.Irq.Count() >= 10 }) // it follows the publish
	if n := r.trace.count("rx used published"); n != 10 {
		t.Errorf("%d publishes, want 10", n)
	}
	if n := r.rx.Irq.Count(); n != 10 {
		t.Errorf("%d interrupts, want 10", n)
	}
	if b := r.stats(rxQueue).Batches; b["1"] != 10 {
		t.Errorf("batch histogram %v, want 10 batches of 1", b)
	}
}

// Tx used entries are published after each send group, or every
// NotifyThreshold chains where the groups are smaller.
func testTxNotifyThresholdPublishesEveryN(t *testing.T, io IOMode) {
	for _, tc := range []struct{ group, thr, want int }{
		{8, 1, 4}, {8, 4, 4}, {8, 16, 2}, {4, 16, 2}, {64, 8, 1}, {0, 8, 1},
	} {
		t.Run(fmt.Sprintf("group%d-thr%d", tc.group, tc.thr), func(t *testing.T) {
			tun := DefaultTuning()
			tun.TxYieldPkts, tun.NotifyThreshold = tc.group, tc.thr
			r := newRig(t, rigOptions{io: io, tuning: tun})
			r.txBurst(32, 60)
			r.activate()
			r.drainPeer(32)
			r.waitUsed(r.tx, 32, nil)
			if n := r.trace.count("tx used published"); n != tc.want {
				t.Errorf("%d publishes, want %d", n, tc.want)
			}
		})
	}
}

func TestTracerIsOffWithoutWriter(t *testing.T) {
	if newTracer(nil) != nil {
		t.Error("a nil writer must give a nil (off) tracer")
	}
}

// A frame larger than its chain (it reaches the overflow byte, or
// recvmmsg cuts it) is dropped and counted, and the chain takes the next
// frame: nothing truncated reaches the guest.
func testRxBatchTruncatedFrameIsDropped(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatMAC)
	r := newRig(t, rigOptions{io: io, features: feat, rxBufSize: 1600})
	r.rx.AddRxBuffers(4, 1600)
	r.peerWrite(r.txFrame(0, 3000))
	r.peerWrite(r.txFrame(1, 100))
	r.activate()
	var lens []uint32
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { lens = append(lens, u.Len) })
	time.Sleep(10 * time.Millisecond)
	if lens[0] != 112 || r.rx.UsedIdx() != 1 {
		t.Errorf("used lengths %v, used index %d; want [112] and 1", lens, r.rx.UsedIdx())
	}
	if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
		t.Errorf("too-big drops %d, want 1", d)
	}
}

// With no weights at all a guest that keeps a ring full could keep a run
// going forever; once Reset has begun, the handlers stop at the next frame.
func testHandlersStopWhenResetBegins(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, tuning: Tuning{RxBatch: 64, NotifyThreshold: 8}})
	r.rx.AddRxBuffers(64, 2048) // room for a 64 KiB TSO frame
	r.txBurst(16, 60)
	for i := 0; i < 4; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	w, err := newWorker(r.dev, r.dev.pairs[0], r.drv.Activation(r.feat, r.rx, r.tx))
	if err != nil {
		t.Fatal(err)
	}
	defer w.closePoll()
	w.stopping.Store(true)
	if w.handleTx() || w.handleRx() {
		t.Error("a handler asked to be requeued while stopping")
	}
	if r.tx.UsedIdx() != 0 || r.rx.UsedIdx() != 0 {
		t.Errorf("handlers moved %d tx and %d rx frames after Reset began", r.tx.UsedIdx(), r.rx.UsedIdx())
	}
	w.stopping.Store(false)
	w.handleTx()
	w.handleRx()
	if r.tx.UsedIdx() != 16 || r.rx.UsedIdx() != 4 {
		t.Errorf("without stopping: %d tx, %d rx used, want 16 and 4", r.tx.UsedIdx(), r.rx.UsedIdx())
	}
}

// Tx chains go TxYieldPkts at a time (at most 64), in order, through one
// send of the frame-I/O: one sendmmsg or io_uring_enter per group, or a
// writev per frame. The notify threshold does not split a group.
func TestTxGroupsPerSend(t *testing.T) {
	for _, tc := range []struct {
		io       IOMode
		syscalls uint64
	}{{IOWritev, 20}, {IOSendmmsg, 3}, {IOUring, 3}} {
		t.Run(string(tc.io), func(t *testing.T) {
			skipUnlessIO(t, tc.io)
			tun := DefaultTuning()
			tun.NotifyThreshold, tun.TxYieldPkts = 2, 8
			r := newRig(t, rigOptions{io: tc.io, tuning: tun})
			if io := r.dev.IO(); io != tc.io {
				t.Fatalf("device IO %q, want %s", io, tc.io)
			}
			r.txBurst(20, 60)
			r.activate()
			for i := 0; i < 20; i++ {
				if got := r.peerRead(); string(got) != string(r.txFrame(i, 60)) {
					t.Fatalf("frame %d out of order or changed", i)
				}
			}
			r.waitUsed(r.tx, 20, nil)
			if a, b := r.trace.count("tx "+string(tc.io)+" 8"), r.trace.count("tx "+string(tc.io)+" 4"); a != 2 || b != 1 {
				t.Errorf("groups: %d of 8 and %d of 4, want 2 and 1\n%s", a, b, r.trace.String())
			}
			if s := r.stats(txQueue); s.Frames != 20 || s.Syscalls != tc.syscalls {
				t.Errorf("%d frames in %d system calls, want 20 in %d", s.Frames, s.Syscalls, tc.syscalls)
			}
		})
	}
}
