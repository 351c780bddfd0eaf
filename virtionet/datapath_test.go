package virtionet

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio/virtiotest"
)

func testTxFramesReachBackend(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.activate()
	const n = 20
	for i := 0; i < n; i++ {
		// header and frame in separate buffers, as Linux sends them
		f := r.txFrame(i, 60+i)
		if _, err := r.tx.AddChain([][]byte{f[:r.hdrLen()], f[r.hdrLen():]}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r.tx.Kick()
	for i := 0; i < n; i++ {
		if got, want := r.peerRead(), r.txFrame(i, 60+i); !bytes.Equal(got, want) {
			t.Fatalf("frame %d: got %x, want %x", i, got, want)
		}
	}
	r.waitUsed(r.tx, n, nil)
	s := r.stats(txQueue)
	if s.Frames != n || s.Bytes != uint64(n*60+n*(n-1)/2) || len(s.Drops) != 0 {
		t.Errorf("tx stats %+v", s)
	}
	if hdr, off := r.sp.Settings(); hdr != 12 || off != tunFCsum|tunFTSO4|tunFTSO6 {
		t.Errorf("backend vnet header %d offload %#x, want 12 and all offloads", hdr, off)
	}
}

func testTxIndirectChains(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, indirect: 8, size: 32})
	r.activate()
	f := r.txFrame(7, 300)
	parts := [][]byte{f[:5], f[5:12], f[12:100], f[100:]}
	if _, err := r.tx.AddIndirect(parts, nil); err != nil {
		t.Fatal(err)
	}
	r.tx.Kick()
	if got := r.peerRead(); !bytes.Equal(got, f) {
		t.Fatalf("got %d bytes, want the %d-byte frame", len(got), len(f))
	}
	r.waitUsed(r.tx, 1, nil)
}

// A chain of more buffers than one writev takes (UIO_MAXIOV) still goes
// out whole, through a copy.
func testTxChainLongerThanIovMax(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, size: 2048, rxBufSize: 16, txBufSize: 16})
	r.activate()
	f := r.txFrame(5, 1100*8)
	var parts [][]byte
	for i := 0; i < len(f); i += 8 {
		parts = append(parts, f[i:min(i+8, len(f))])
	}
	if len(parts) <= maxIov {
		t.Fatalf("only %d parts", len(parts))
	}
	if _, err := r.tx.AddChain(parts, nil); err != nil {
		t.Fatal(err)
	}
	r.tx.Kick()
	if got := r.peerRead(); !bytes.Equal(got, f) {
		t.Fatalf("got %d bytes, want the %d-byte frame", len(got), len(f))
	}
}

func testTxDropsShortFramesAndWritableBuffers(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.activate()
	r.tx.AddChain([][]byte{make([]byte, 8)}, nil)           // shorter than the header
	r.tx.AddChain([][]byte{r.txFrame(0, 20)}, []uint32{64}) // a writable buffer on tx
	r.tx.AddChain([][]byte{r.txFrame(1, 20)}, nil)          // fine
	r.tx.Kick()
	if got := r.peerRead(); !bytes.Equal(got, r.txFrame(1, 20)) {
		t.Fatalf("got %x", got)
	}
	r.waitUsed(r.tx, 3, nil)
	s := r.stats(txQueue)
	if s.Drops[DropTxShort.String()] != 1 || s.Drops[DropTxWritable.String()] != 1 || s.Frames != 1 {
		t.Errorf("tx stats %+v", s)
	}
}

func testRxFrameIntoGuestBuffer(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.rx.AddRxBuffers(64, 2048) // room for a 64 KiB TSO frame
	r.activate()
	r.rx.Kick()
	want := r.txFrame(3, 1514)
	r.peerWrite(want)
	var got []byte
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { got = r.rx.ReadBuf(u, nil) })
	if numBuffers(got) != 1 {
		t.Errorf("num_buffers %d, want 1", numBuffers(got))
	}
	if !bytes.Equal(got[12:], want[12:]) {
		t.Errorf("frame differs")
	}
	if s := r.stats(rxQueue); s.Frames != 1 || s.Bytes != 1514 {
		t.Errorf("rx stats %+v", s)
	}
}

func testRxMergeableBuffers(t *testing.T, io IOMode) {
	// Without GUEST_TSO a frame is at most 1530 bytes: 6 buffers of 256.
	r := newRig(t, rigOptions{io: io, rxBufSize: 256, features: allBut(FeatGuestTSO4 | FeatGuestTSO6)})
	r.rx.AddRxBuffers(64, 256)
	r.activate()
	want := r.txFrame(9, 1000) // 1012 bytes: 4 buffers of 256
	r.peerWrite(want)
	r.peerWrite(r.txFrame(1, 50))
	var used []virtiotest.UsedElem
	r.waitUsed(r.rx, 5, func(u virtiotest.UsedElem) { used = append(used, u) })
	got, n, err := r.rx.ReadMergeable(used, nil)
	if err != nil || n != 4 {
		t.Fatalf("ReadMergeable: %d buffers, %v", n, err)
	}
	if !bytes.Equal(got[12:], want[12:]) {
		t.Errorf("merged frame differs")
	}
	got, n, _ = r.rx.ReadMergeable(used[4:], nil)
	if n != 1 || len(got) != 62 {
		t.Errorf("second frame: %d buffers, %d bytes", n, len(got))
	}
}

func testRxWithoutMergeableUsesOneChainPerFrame(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatEventIdx | FeatMAC)
	r := newRig(t, rigOptions{io: io, features: feat, rxBufSize: 1600})
	r.rx.AddRxBuffers(4, 1600) // big enough for any 1500-MTU frame
	r.rx.AddRxBuffers(1, 200)  // too small for a full frame: goes through scratch
	r.activate()
	for i := 0; i < 4; i++ {
		r.peerWrite(r.txFrame(i, 1500))
	}
	r.peerWrite(r.txFrame(5, 100))
	var frames [][]byte
	r.waitUsed(r.rx, 5, func(u virtiotest.UsedElem) { frames = append(frames, r.rx.ReadBuf(u, nil)) })
	for i, f := range frames {
		if numBuffers(f) != 1 {
			t.Errorf("frame %d: num_buffers %d", i, numBuffers(f))
		}
	}
	if len(frames[4]) != 112 {
		t.Errorf("small frame: %d bytes, want 112", len(frames[4]))
	}
	if _, off := r.sp.Settings(); off != 0 {
		t.Errorf("offloads %#x set without GUEST_CSUM", off)
	}
}

func testRxDropsFrameLargerThanBuffers(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatMAC)
	r := newRig(t, rigOptions{io: io, features: feat, rxBufSize: 200})
	r.rx.AddRxBuffers(1, 200)
	r.activate()
	r.peerWrite(r.txFrame(0, 1000)) // does not fit in 200 bytes
	r.peerWrite(r.txFrame(1, 100))
	var got []byte
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { got = r.rx.ReadBuf(u, nil) })
	if len(got) != 112 {
		t.Errorf("delivered %d bytes, want the 112-byte frame", len(got))
	}
	if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
		t.Errorf("too-big drops %d, want 1", d)
	}
}

// Frames wait in the backend while the guest has no buffers, and the
// device reads none of them until buffers arrive.
func testRxWaitsForBuffers(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.activate()
	for i := 0; i < 3; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	time.Sleep(20 * time.Millisecond)
	if s := r.stats(rxQueue); s.Frames != 0 || len(s.Drops) != 0 {
		t.Fatalf("device touched frames without buffers: %+v", s)
	}
	r.rx.AddRxBuffers(64, 2048)
	r.rx.Kick()
	r.waitUsed(r.rx, 3, nil)
}

func testInterruptSuppressionEventIdx(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.rx.DisableInterrupts()
	r.tx.DisableInterrupts()
	r.activate()
	r.tx.AddChain([][]byte{r.txFrame(0, 60)}, nil)
	r.tx.Kick()
	r.peerRead()
	r.waitUsed(r.tx, 1, nil)
	if n := r.tx.Irq.Count(); n != 0 {
		t.Errorf("%d tx interrupts while the driver suppressed them", n)
	}
	r.tx.EnableInterrupts()
	r.tx.AddChain([][]byte{r.txFrame(1, 60)}, nil)
	r.tx.Kick()
	r.peerRead()
	if !r.tx.Irq.Wait(time.Second) {
		t.Fatal("no tx interrupt after the driver asked for one")
	}
}

// With EVENT_IDX the device sets avail_event: exactly at its position
// after a single chain, NotifyThreshold-1 ahead during a burst, and back to
// exact once the burst is over.
func testKickSuppressionAvailEvent(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.NotifyThreshold = 8
	r := newRig(t, rigOptions{io: io, tuning: tun})
	// Posted and kicked before DRIVER_OK: after it, the worker's first
	// look could take the chain before the kick and move avail_event.
	r.tx.AddChain([][]byte{r.txFrame(0, 60)}, nil)
	if !r.tx.Kick() {
		t.Fatal("first chain not kicked")
	}
	r.activate()
	r.peerRead()
	r.waitUsed(r.tx, 1, nil)
	waitFor(t, "avail_event at 1", func() bool { return r.tx.AvailEvent() == 1 })

	for i := 0; i < 16; i++ {
		r.tx.AddChain([][]byte{r.txFrame(i, 60)}, nil)
	}
	r.tx.Kick()
	for i := 0; i < 16; i++ {
		r.peerRead()
	}
	r.waitUsed(r.tx, 16, nil)
	// After the burst the device polls briefly, then asks for exact kicks.
	waitFor(t, "avail_event back at 17", func() bool { return r.tx.AvailEvent() == 17 })
	if r.trace.count("tx", "kick") != 2 {
		t.Errorf("device saw %d kicks, want 2", r.trace.count("tx", "kick"))
	}
}

func testResetStopsWorkerAndReactivates(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.activate()
	r.tx.AddChain([][]byte{r.txFrame(0, 60)}, nil)
	r.tx.Kick()
	r.peerRead()
	r.waitUsed(r.tx, 1, nil)
	r.dev.Reset()
	r.tx.AddChain([][]byte{r.txFrame(1, 60)}, nil)
	r.tx.ForceKick()
	time.Sleep(20 * time.Millisecond)
	if r.tx.UsedIdx() != 1 {
		t.Fatalf("device used a chain after Reset")
	}
	r.dev.Reset() // twice is fine
	// A new activation on fresh rings works.
	r2 := newRig(t, rigOptions{io: io})
	r2.dev, r.dev = r.dev, r2.dev
	r2.sp, r.sp = r.sp, r2.sp
	r2.activate()
	r2.tx.AddChain([][]byte{r2.txFrame(2, 60)}, nil)
	r2.tx.Kick()
	if got := r2.peerRead(); !bytes.Equal(got, r2.txFrame(2, 60)) {
		t.Fatal("no frame after re-activation")
	}
}

func testHostileTxChainFailsOnlyTx(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.rx.AddRxBuffers(64, 2048)
	r.activate()
	// A chain that loops on itself.
	r.tx.WriteDesc(0, virtiotest.RawDesc{Addr: r.tx.BufAddr(0), Len: 64, Flags: 1, Next: 0})
	r.tx.PushAvail(0)
	r.tx.ForceKick()
	waitFor(t, "Fail reported", func() bool { return len(r.drv.Failures()) == 1 })
	if !strings.Contains(r.drv.Failures()[0].Error(), "tx queue") {
		t.Errorf("failure %v does not name the tx queue", r.drv.Failures()[0])
	}
	r.tx.ForceKick()
	// rx still works.
	r.peerWrite(r.txFrame(0, 64))
	r.waitUsed(r.rx, 1, nil)
	if n := len(r.drv.Failures()); n != 1 {
		t.Errorf("%d failures, want 1", n)
	}
}

func testHostileRxChains(t *testing.T, io IOMode) {
	for _, tc := range []struct {
		name string
		add  func(r *rig)
	}{
		{"readable buffer", func(r *rig) { r.rx.AddChain([][]byte{make([]byte, 64)}, nil) }},
		{"smaller than the header", func(r *rig) { r.rx.AddChain(nil, []uint32{4}) }},
		{"outside memory", func(r *rig) {
			r.rx.WriteDesc(0, virtiotest.RawDesc{Addr: 1 << 40, Len: 2048, Flags: 2})
			r.rx.PushAvail(0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOptions{io: io})
			tc.add(r)
			r.activate()
			r.peerWrite(r.txFrame(0, 64))
			waitFor(t, "Fail reported", func() bool { return len(r.drv.Failures()) == 1 })
			// tx still works.
			r.tx.AddChain([][]byte{r.txFrame(1, 60)}, nil)
			r.tx.Kick()
			r.peerRead()
		})
	}
}

func testStatsJSONAndText(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.activate()
	r.tx.AddChain([][]byte{make([]byte, 4)}, nil)
	r.tx.Kick()
	r.waitUsed(r.tx, 1, nil)
	s := r.dev.Stats()
	if !strings.Contains(s.String(), "dropped 1: tx frame shorter than the vnet header") {
		t.Errorf("text stats:\n%s", s)
	}
	b, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(b), `"tx frame shorter than the vnet header":1`) {
		t.Errorf("json stats %s, %v", b, err)
	}
	if _, err := os.Stat("/proc/self/schedstat"); err == nil && s.WorkerCPUNs == 0 {
		t.Error("no worker CPU time")
	}
	r.dev.Reset()
	if after := r.dev.Stats().WorkerCPUNs; after < s.WorkerCPUNs {
		t.Errorf("worker CPU fell from %d to %d after Reset", s.WorkerCPUNs, after)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// allBut is every feature a socketpair device offers except drop.
func allBut(drop uint64) uint64 {
	return offeredFeatures(tunFCsum|tunFTSO4|tunFTSO6) &^ drop
}

// A backend whose peer went away (reads return 0 bytes) is not polled in a
// loop: the worker stops watching it and stays idle.
func testRxBackendEOFDoesNotSpin(t *testing.T, io IOMode) {
	for _, single := range []bool{false, true} {
		r := newRig(t, rigOptions{io: io})
		r.sp.SingleFrame = single
		r.rx.AddRxBuffers(64, 2048)
		r.activate()
		unix.Close(r.sp.Peer)
		r.sp.Peer = -1
		time.Sleep(20 * time.Millisecond)
		cpu := r.dev.Stats().WorkerCPUNs
		time.Sleep(100 * time.Millisecond)
		if spent := r.dev.Stats().WorkerCPUNs - cpu; spent > uint64(20*time.Millisecond) {
			t.Errorf("single read %v: worker used %v of CPU in 100 ms with a closed backend", single, time.Duration(spent))
		}
		if s := r.stats(rxQueue); s.Frames != 0 {
			t.Errorf("rx stats %+v", s)
		}
	}
}
