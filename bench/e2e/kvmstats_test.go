package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"

	"tinyvmm/bench/kvmstat"
	"tinyvmm/kvm"
)

func TestExitDetailPerFrame(t *testing.T) {
	d := kvmstat.Counts{"exits": 3010, "io_exits": 10, "mmio_exits": 2, "irq_injections": 50, "halt_exits": 0, "pf_fixed": 9}
	m := exitDetail(d, 1000, 20)
	for k, want := range map[string]float64{
		// The console's port exits are not the datapath's.
		"exits_per_frame": 3, "irqs_per_frame": 0.05, "kicks_per_frame": 0.02,
		"kvm_exits": 3010, "kvm_io_exits": 10, "kvm_mmio_exits": 2, "kvm_irq_injections": 50, "kvm_halt_exits": 0,
	} {
		got, ok := m[k]
		if !ok || math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if _, ok := m["kvm_pf_fixed"]; ok {
		t.Error("a counter outside kvmstat.Names was reported")
	}
	// No frames: the counts, no ratios.
	m = exitDetail(d, 0, 20)
	if _, ok := m["exits_per_frame"]; ok || m["kvm_exits"] != 3010 {
		t.Errorf("no frames: %v", m)
	}
	if _, ok := m["kicks_per_frame"]; ok {
		t.Errorf("no frames: kicks per frame %v", m)
	}
}

func TestMarkReaderFiresAtTheMarker(t *testing.T) {
	in := "BENCH ready mac=x\nnoise BENCH resu\nBENCH result mode=tx frames=9\nBENCH result again\n"
	src := &countReader{r: iotest.OneByteReader(strings.NewReader(in))}
	fired, at := 0, -1
	m := &markReader{r: src, marker: []byte("BENCH result"), at: func() { fired++; at = src.n }}
	out, err := io.ReadAll(m)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Index(in, "BENCH result") + len("BENCH result")
	if fired != 1 || at != want || string(out) != in {
		t.Errorf("fired %d times after byte %d (want once after %d); stream intact %v", fired, at, want, string(out) == in)
	}
}

type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestHostCPUPerFrame: the VMM's CPU outside the guest over the window,
// per frame the guest moved, from the exact time (not the ticks); none
// without frames.
func TestHostCPUPerFrame(t *testing.T) {
	run := &GuestRun{KVM: kvmstat.Counts{"exits": 300}, IOURings: -1, Switches: map[string]uint64{"vmm_host_cpu_ms": 1000, "vmm_host_cpu_us": 900_000,
		"vmm_host_cpu_us:net-tap0": 600_000, "vmm_runq_wait_us:net-tap0": 20_000}}
	s := Sample{Detail: map[string]float64{}}
	addExits(&s, run, 200_000, 3)
	if got := s.Detail["host_cpu_us_per_frame"]; got != 4.5 {
		t.Errorf("host CPU per frame %v us, want 4.5 (900 ms over 200,000 frames)", got)
	}
	// And by thread, as the Linux guest's cells have it.
	if got, wait := s.Detail["host_cpu_us_per_frame:net-tap0"], s.Detail["runq_wait_us_per_frame:net-tap0"]; got != 3 || wait != 0.1 {
		t.Errorf("the worker's CPU and wait per frame %v, %v us, want 3 and 0.1", got, wait)
	}
	s = Sample{Detail: map[string]float64{}}
	addExits(&s, run, 0, 0)
	if _, ok := s.Detail["host_cpu_us_per_frame"]; ok {
		t.Errorf("host CPU per frame without frames: %v", s.Detail)
	}
}

// TestCellsCarryPerFrameCounts: medians over the runs that worked, in the
// JSON names the issue asks for, only where there were counts.
func TestCellsCarryPerFrameCounts(t *testing.T) {
	o := DefaultOptions()
	rep := newReport(o, kvm.Host{}, map[System]systemState{
		SysTinyvmm: {Label: "tinyvmm", Comparable: true}, SysCeiling: {Label: "ceiling", Comparable: true},
		SysQEMU: {Label: "QEMU (KVM)", Comparable: true}})
	e := experiment{Key: "tx64", Title: "guest->host pps, 64 B", Unit: "pps"}
	rep.plan([]experiment{e})
	for i, epf := range []float64{2, 8, 4} {
		rep.add(e, SysTinyvmm, Sample{Value: 1000, Detail: exitDetail(kvmstat.Counts{"exits": uint64(epf * 1000), "irq_injections": 10}, 1000, float64(100*(i+1)))})
	}
	rep.add(e, SysTinyvmm, Sample{Err: "failed", Detail: map[string]float64{"exits_per_frame": 100}})
	rep.add(e, SysQEMU, Sample{Value: 900, Detail: exitDetail(kvmstat.Counts{"exits": 9000, "irq_injections": 0}, 1000, 3)})
	rep.add(e, SysCeiling, Sample{Value: 5000, Detail: map[string]float64{"sent": 1}})
	rep.finish(0)
	tv := rep.cell("tx64", SysTinyvmm)
	if tv.ExitsPerFrame == nil || *tv.ExitsPerFrame != 4 || *tv.KicksPerFrame != 0.2 || *tv.IRQsPerFrame != 0.01 {
		t.Errorf("tinyvmm cell: %+v", tv)
	}
	q := rep.cell("tx64", SysQEMU)
	if q.ExitsPerFrame == nil || *q.ExitsPerFrame != 9 || *q.IRQsPerFrame != 0 {
		t.Errorf("QEMU cell: %+v", q)
	}
	if c := rep.cell("tx64", SysCeiling); c.ExitsPerFrame != nil {
		t.Errorf("ceiling has exits: %v", *c.ExitsPerFrame)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"exits_per_frame":4`, `"kicks_per_frame":0.2`, `"irqs_per_frame":0`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	var out bytes.Buffer
	rep.printPerFrame(&out)
	if !strings.Contains(out.String(), "4.000") || !strings.Contains(out.String(), "9.000") || !strings.Contains(out.String(), "0.200") {
		t.Errorf("per-frame table:\n%s", out.String())
	}
}
