package bootbench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tinyvmm/vmm"
)

func f(v float64) *float64 { return &v }

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got, ok := median(c.xs); !ok || got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if _, ok := median(nil); ok {
		t.Error("median of nothing")
	}
	xs := []float64{3, 1, 2}
	median(xs)
	if xs[0] != 3 {
		t.Error("median sorted its argument")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSummarizeMediansPhasesExitsAndRSS(t *testing.T) {
	s := &Result{System: SysTinyvmm, Runs: []Run{
		{TotalS: 1.0, FirstRunS: f(0.01), KernelS: f(0.01), InitS: f(0.5), ExitS: f(0.9),
			ExitsAtInit: map[string]uint64{"exits": 100, "io_exits": 10, "pf_fixed": 5}, PeakRSSKiB: 30 << 10, GuestKiB: 20 << 10},
		{TotalS: 3.0, FirstRunS: f(0.03), KernelS: f(0.03), InitS: f(0.7), ExitS: f(2.9),
			ExitsAtInit: map[string]uint64{"exits": 300, "io_exits": 30}, PeakRSSKiB: 40 << 10, GuestKiB: 20 << 10},
		{TotalS: 2.0, FirstRunS: f(0.02), KernelS: f(0.02), InitS: f(0.6), ExitS: f(1.9),
			ExitsAtInit: map[string]uint64{"exits": 200, "io_exits": 20}, PeakRSSKiB: 35 << 10, GuestKiB: 20 << 10},
		{TotalS: 99, Err: "boom"},
	}}
	s.summarize()
	if s.OK != 3 || s.Failed != 1 {
		t.Fatalf("ok %d failed %d", s.OK, s.Failed)
	}
	for k, want := range map[string]float64{"total": 2, "first_kvm_run": 0.02, "kernel_entry": 0.02, "init": 0.6, "exit": 1.9} {
		if !near(s.MedianS[k], want) {
			t.Errorf("median %s = %v, want %v", k, s.MedianS[k], want)
		}
	}
	for k, want := range map[string]float64{"to_kernel_entry": 0.02, "kernel_to_init": 0.58, "init_to_exit": 1.3, "exit_to_reaped": 0.1} {
		if !near(s.PhaseMedianS[k], want) {
			t.Errorf("phase %s = %v, want %v", k, s.PhaseMedianS[k], want)
		}
	}
	if s.ExitsAtInit["exits"] != 200 || s.ExitsAtInit["io_exits"] != 20 {
		t.Errorf("exits %v", s.ExitsAtInit)
	}
	if _, ok := s.ExitsAtInit["pf_fixed"]; ok {
		t.Error("a counter that is not an exit is in the exits")
	}
	if len(s.SetupMedianMs) != 0 {
		t.Errorf("set-up steps from runs without any: %v", s.SetupMedianMs)
	}
	if s.RSSOverheadMiB == nil || *s.RSSOverheadMiB != 15 {
		t.Errorf("RSS overhead %v, want 15 MiB", s.RSSOverheadMiB)
	}
}

func TestQEMURunHasNoFirstRunAndExitsAtTotal(t *testing.T) {
	s := &Result{System: SysMicrovm, Runs: []Run{{TotalS: 2, KernelS: f(0.4), InitS: f(1.5)}}}
	s.summarize()
	if _, ok := s.MedianS["first_kvm_run"]; ok {
		t.Error("QEMU got a first KVM_RUN")
	}
	if s.MedianS["exit"] != 2 || s.PhaseMedianS["exit_to_reaped"] != 0 || !near(s.PhaseMedianS["kernel_to_init"], 1.1) {
		t.Errorf("medians %v phases %v", s.MedianS, s.PhaseMedianS)
	}
	if s.RSSOverheadMiB != nil {
		t.Error("an RSS overhead without a sample")
	}
}

func TestSetupMedians(t *testing.T) {
	steps := func(a, b float64) []vmm.SetupStep {
		return []vmm.SetupStep{{Step: "load", Ms: a}, {Step: "vCPUs", Ms: b}}
	}
	s := &Result{System: SysTinyvmm, Runs: []Run{
		{TotalS: 1, Setup: steps(10, 1)}, {TotalS: 1, Setup: steps(30, 3)}, {TotalS: 1, Setup: steps(20, 2)},
		{TotalS: 1, Setup: steps(99, 99), Err: "failed runs do not count"},
	}}
	s.summarize()
	if want := steps(20, 2); len(s.SetupMedianMs) != 2 || s.SetupMedianMs[0] != want[0] || s.SetupMedianMs[1] != want[1] {
		t.Fatalf("set-up medians %v, want %v", s.SetupMedianMs, want)
	}
}

func TestFillFromStats(t *testing.T) {
	start := time.Unix(1000, 0)
	ns := func(ms int64) int64 { return start.UnixNano() + ms*1e6 }
	raw := []byte(`{"exit_ms": 1, "vcpu_exits": {}, "boot": {"process_unix_ns": ` + itoa(ns(5)) +
		`, "vmm_run_unix_ns": ` + itoa(ns(6)) + `, "first_kvm_run_unix_ns": ` + itoa(ns(12)) +
		`, "init_unix_ns": ` + itoa(ns(400)) + `, "stop_unix_ns": ` + itoa(ns(900)) +
		`, "kvm_stats_at_init": {"exits": 77}, "peak_rss_kib_at_init": 50000, "guest_touched_kib_at_init": 40000, "setup_ms": [{"step": "load", "ms": 1.5}]}}`)
	var run Run
	if err := fillFromStats(&run, raw, start); err != nil {
		t.Fatal(err)
	}
	if !near(*run.FirstRunS, 0.012) || !near(*run.KernelS, 0.012) || !near(*run.InitS, 0.4) || !near(*run.ExitS, 0.9) {
		t.Errorf("milestones %v %v %v %v", *run.FirstRunS, *run.KernelS, *run.InitS, *run.ExitS)
	}
	if run.ExitsAtInit["exits"] != 77 || run.PeakRSSKiB != 50000 || run.GuestKiB != 40000 || len(run.Setup) != 2 ||
		run.Setup[0].Step != "spawn to package init" || !near(run.Setup[0].Ms, 5) || run.Setup[1].Ms != 1.5 {
		t.Errorf("run %+v", run)
	}
	noInit := bytes.Replace(raw, []byte(`"init_unix_ns": `+itoa(ns(400))), []byte(`"init_unix_ns": 0`), 1)
	if err := fillFromStats(&Run{}, noInit, start); err == nil || !strings.Contains(err.Error(), "boot timer") {
		t.Errorf("a boot without the timer byte gave %v", err)
	}
	if err := fillFromStats(&Run{}, []byte(`{"exit_ms": 1}`), start); err == nil {
		t.Error("stats without boot timestamps gave no error")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestReportRoundTripTableAndPlot(t *testing.T) {
	r := &Report{Date: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), Runs: 1, MemMiB: 256, Systems: []*Result{
		{System: SysTinyvmm, Runs: []Run{{TotalS: 1, FirstRunS: f(0.01), KernelS: f(0.01), InitS: f(0.5), ExitS: f(0.9),
			ExitsAtInit: map[string]uint64{"exits": 100}}}},
		{System: SysMicrovm, Runs: []Run{{TotalS: 2, KernelS: f(0.3), InitS: f(1.5)}}},
		{System: SysQ35, Runs: []Run{{TotalS: 9, Err: "QEMU died"}}},
		{System: SysFloor, Runs: []Run{{TotalS: 0.02, FirstRunS: f(0.012), Setup: []vmm.SetupStep{{Step: "spawn to first KVM_RUN", Ms: 12}}}}},
	}}
	r.summarize()
	dir := t.TempDir()
	file := filepath.Join(dir, "boot.json")
	if err := r.WriteJSON(file); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(file)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	back.Table(&out)
	text := out.String()
	for _, want := range []string{"tinyvmm  1/1  1000  10  10  500  900", "qemu-microvm  1/1  2000  -  300  1500  2000",
		"qemu-q35  0/1", "kvm-floor  1/1  20  12  -  -  20", "kvm-floor set-up, median ms: spawn to first KVM_RUN 12.0;",
		"tinyvmm/microvm total: 0.50", "qemu-q35 run 0 failed: QEMU died"} {
		if !strings.Contains(strings.Join(strings.Fields(text), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if err := back.Plot(filepath.Join(dir, "boot.png")); err != nil {
		t.Fatal(err)
	}
}

// A fake kvmprobe prints its stamp as the real one does; runFloor takes the
// first KVM_RUN from it, in seconds after the spawn. (The stamp is an hour
// ahead, fixed here: L1's busybox has no date with nanoseconds.)
func TestFloorRunTakesKVMProbesStamp(t *testing.T) {
	dir := t.TempDir()
	probe := filepath.Join(dir, "kvmprobe")
	stamp := time.Now().Add(time.Hour)
	script := "#!/bin/sh\n[ \"$*\" = '-exits 1 -stamp' ] || { echo \"args: $*\"; exit 2; }\n" +
		"echo 'KVM API version 12'\necho 'KVMPROBE first KVM_RUN unix-ns " + strconv.FormatInt(stamp.UnixNano(), 10) + "'\necho 'KVMPROBE OK'\n"
	if err := os.WriteFile(probe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &bencher{o: Options{Timeout: time.Minute}, floor: probe}
	run := b.runFloor()
	if run.Err != "" {
		t.Fatal(run.Err)
	}
	if run.FirstRunS == nil || *run.FirstRunS < 3590 || *run.FirstRunS > 3600 {
		t.Fatalf("first KVM_RUN %v s after the spawn, want just under 3600", run.FirstRunS)
	}
	if len(run.Setup) != 1 || run.Setup[0].Ms != *run.FirstRunS*1000 {
		t.Errorf("setup %v", run.Setup)
	}
	if err := os.WriteFile(probe, []byte("#!/bin/sh\necho KVMPROBE OK\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if run := b.runFloor(); !strings.Contains(run.Err, "no first KVM_RUN stamp") {
		t.Errorf("a probe without a stamp: error %q", run.Err)
	}
}
