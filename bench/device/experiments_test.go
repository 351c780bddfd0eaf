package device

import (
	"testing"
	"time"

	"tinyvmm/internal/scratchns"
	"tinyvmm/virtionet"
)

func skipUnlessNetns(t testing.TB) {
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
}

// Each experiment runs once, briefly, and measures something.
func TestExperimentsMeasure(t *testing.T) {
	skipUnlessNetns(t)
	lat, err := seed002(256, 0, 300*time.Millisecond, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed 002 at 256: %+v", lat)
	if lat.Samples == 0 || lat.TxPPS <= 0 || lat.MinMs <= 0 || lat.MaxMs < lat.AvgMs {
		t.Errorf("seed 002 row %+v", lat)
	}
	for _, be := range []string{"tap", "af_packet"} {
		for _, b := range []int{1, 64} {
			row, err := seed004(be, b, true, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seed 004: %+v", row)
			// Counters are read while the worker runs, so frames/batches may
			// be off by a frame in flight; the histogram is exact.
			if row.PPS <= 0 || (b == 1 && !onlyBatchesOfOne(row.Batches)) {
				t.Errorf("seed 004 row %+v, batches %v", row, row.Batches)
			}
		}
	}
	for _, thr := range []int{1, 8, 64} {
		row, err := seed000(thr, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed 000: %+v", row)
		if row.PPS <= 0 {
			t.Errorf("seed 000 row %+v", row)
		}
	}
	pps, err := txRate(virtionet.IOWritev, virtionet.DefaultTuning(), 0, nil, 64, 300*time.Millisecond)
	t.Logf("tx to host socket: %.0f frames/s, %.0f worker ns/frame (%v)", pps.pps, pps.nsPerFrame, err)
	if err != nil || pps.pps <= 0 || pps.nsPerFrame <= 0 {
		t.Errorf("tx rate %+v, %v", pps, err)
	}
}

func TestBackendMechanismsMeasure(t *testing.T) {
	skipUnlessNetns(t)
	for _, m := range mechanisms {
		row, err := backendRun(m, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", row)
		if row.PPS <= 0 || row.FramesPerSyscall <= 0 || row.NsPerFrame <= 0 {
			t.Errorf("row %+v", row)
		}
	}
}

// The device's mechanisms: one system call per frame, or a batch of
// frames per io_uring_enter (both directions).
func TestDeviceMechanismsMeasure(t *testing.T) {
	skipUnlessNetns(t)
	for _, dir := range []string{"tx", "rx"} {
		for m := range devMechanisms {
			row, err := devMechRun(dir, m, 64, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", row)
			if row.PPS <= 0 || row.NsPerFrame <= 0 || row.FramesPerSyscall <= 0 {
				t.Errorf("row %+v", row)
			}
			// Counters are read while the worker runs: a frame in flight.
			if m == 0 && row.FramesPerSyscall > 1.01 {
				t.Errorf("%s: %.2f frames per system call without io_uring", dir, row.FramesPerSyscall)
			}
			if m == 1 && dir == "tx" && row.IO == string(virtionet.IOUring) && row.FramesPerSyscall < 1.5 {
				t.Errorf("tx io_uring moved only %.2f frames per system call", row.FramesPerSyscall)
			}
		}
	}
}

func onlyBatchesOfOne(h map[string]uint64) bool {
	for k, n := range h {
		if k != "1" && n > 0 {
			return false
		}
	}
	return h["1"] > 0
}

// The multiqueue rows measure: with 2 pairs both pairs move frames, in
// both directions (rx: the tap spreads the two senders' flows).
func TestMultiqueueMeasures(t *testing.T) {
	skipUnlessNetns(t)
	for _, dir := range []string{"tx", "rx"} {
		for _, pairs := range []int{1, 2} {
			row, err := mqRun(dir, pairs, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("multiqueue: %+v", row)
			if row.PPS <= 0 || len(row.PairPPS) != map[int]int{1: 0, 2: 2}[pairs] {
				t.Errorf("row %+v", row)
			}
			for p, pps := range row.PairPPS {
				if pps <= 0 {
					t.Errorf("%s: pair %d moved nothing: %+v", dir, p, row)
				}
			}
		}
	}
}
