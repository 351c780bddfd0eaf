package e2e

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"tinyvmm/kvm"
)

func TestRotateInterleaves(t *testing.T) {
	s := []System{SysTinyvmm, SysCeiling, SysQEMU}
	rotate(s, 1)
	if !slices.Equal(s, []System{SysCeiling, SysQEMU, SysTinyvmm}) {
		t.Errorf("rotate by 1: %v", s)
	}
}

func TestPingStats(t *testing.T) {
	var p PingResult
	for i := 1; i <= 100; i++ {
		p.RTTs = append(p.RTTs, time.Duration(i)*time.Microsecond)
	}
	p.Sent = 102
	s := p.Stats()
	if s.Min != 1 || s.Max != 100 || s.Avg != 50.5 || s.P99 != 99 || s.Lost != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestQEMUColumnFollowsTheHostsKVM: QEMU runs on KVM, and is compared,
// exactly where /dev/kvm is hardware virtualization (as in the nested L1).
func TestQEMUColumnFollowsTheHostsKVM(t *testing.T) {
	o := DefaultOptions()
	o.QEMU = os.Args[0]
	for _, c := range []struct {
		host       kvm.Host
		accel      string
		comparable bool
	}{
		{kvm.Host{Usable: true}, "kvm", true},
		{kvm.Host{Usable: true, PVM: true}, "tcg", false},
		{kvm.Host{Why: "no /dev/kvm"}, "tcg", false},
	} {
		q := detectSystems(o, c.host)[SysQEMU]
		if a := qemuAccel(c.host); a != c.accel || q.Comparable != c.comparable || q.Skip != "" {
			t.Errorf("%+v: accel %s, column %+v; want accel %s, comparable %v", c.host, a, q, c.accel, c.comparable)
		}
	}
}

// TestTableShowsSkippedFailedAndPartial renders a report without running
// anything: a skipped system, a cell whose every run failed, and one with
// one failed run out of three must each say so.
func TestTableShowsSkippedFailedAndPartial(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights = []int{1}, []int{0}
	o.QEMU = os.Args[0] // any executable: the QEMU column must exist without QEMU installed
	host := kvm.Host{Why: "no /dev/kvm here"}
	rep := newReport(o, host, detectSystems(o, host))
	exps := o.experiments(&runner{})
	rep.plan(exps)
	for _, e := range exps {
		for _, v := range []float64{100, 300, 200} {
			rep.add(e, SysCeiling, Sample{Value: v, Detail: map[string]float64{"avg_us": v}})
		}
		switch e.Key {
		case "tx64":
			for i := 0; i < 3; i++ {
				rep.add(e, SysQEMU, Sample{Err: "boom"})
			}
		case "tx1400":
			rep.add(e, SysQEMU, Sample{Value: 50})
			rep.add(e, SysQEMU, Sample{Err: "boom"})
			rep.add(e, SysQEMU, Sample{Value: 70})
		}
	}
	rep.finish(time.Second)
	var out bytes.Buffer
	rep.printTable(&out)
	text := out.String()
	for _, want := range []string{"skipped", "FAILED (3/3)", "60.0 (1/3 failed)", "200", "tinyvmm: skipped: no /dev/kvm here", "failed runs:", "n/c"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if err := rep.write(t.TempDir()); err != nil {
		t.Errorf("write: %v", err)
	}
}

// The tx poll sweep gets its own table: pps, exits and kicks per frame per
// --poll-us value.
func TestTablePollSweep(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights, o.Polls = nil, nil, []int{0, 200}
	host := kvm.Host{Usable: true}
	st := detectSystems(o, host)
	st[SysTinyvmm] = systemState{Label: "tinyvmm", Comparable: true}
	rep := newReport(o, host, st)
	exps := o.experiments(&runner{})
	rep.plan(exps)
	for _, e := range exps {
		if e.Key == "poll200" {
			for _, v := range []float64{4000, 5000, 6000} {
				rep.add(e, SysTinyvmm, Sample{Value: v, Detail: map[string]float64{"exits_per_frame": 0.05, "kicks_per_frame": 0.01}})
			}
		}
	}
	rep.finish(time.Second)
	var out bytes.Buffer
	rep.printTable(&out)
	text := out.String()
	if !strings.Contains(text, "tx poll sweep") || !regexpMatch(`(?m)^\s*200\s+5,000\s+0\.050\s+0\.010\s*$`, text) {
		t.Errorf("no poll row for 200 with 5,000 pps, 0.050 exits and 0.010 kicks per frame:\n%s", text)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// A variant's rows sit beside the default's in their own table.
func TestTableVariants(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights = nil, nil
	o.Variants = []Variant{{Name: "batch", Args: []string{"--worker-batch"}}}
	host := kvm.Host{Usable: true}
	st := detectSystems(o, host)
	st[SysTinyvmm] = systemState{Label: "tinyvmm", Comparable: true}
	st[SysQEMUVhost] = systemState{Label: "QEMU+vhost", Comparable: true}
	rep := newReport(o, host, st)
	exps := o.experiments(&runner{})
	rep.plan(exps)
	for _, e := range exps {
		v := 1000.0
		if strings.HasSuffix(e.Key, "@batch") {
			v = 2000
		}
		rep.add(e, SysTinyvmm, Sample{Value: v, Detail: map[string]float64{"avg_us": v / 10, "exits_per_frame": v / 1e5, "kicks_per_frame": v / 1e6}})
		if !strings.Contains(e.Key, "@") {
			rep.add(e, SysQEMUVhost, Sample{Value: 500, Detail: map[string]float64{"avg_us": 400}})
		}
	}
	rep.finish(time.Second)
	var out bytes.Buffer
	rep.printTable(&out)
	text := out.String()
	if !regexpMatch(`(?m)^\s*default\s+1,000\s+1,000\s+100\s+100\s+0\.010\s+0\.001\s+0\.010\s*$`, text) ||
		!regexpMatch(`(?m)^\s*batch\s+2,000\s+2,000\s+200\s+200\s+0\.020\s+0\.002\s+0\.020\s*$`, text) {
		t.Errorf("variants table wrong:\n%s", text)
	}
	// Against QEMU+vhost, run by run: rx 64 B 1,000 and 2,000 against 500.
	if !regexpMatch(`(?m)^\s*rx 64 B pps\s+1,000 \(2\.00\)\s+2,000 \(4\.00\)\s+500\s*$`, text) ||
		!regexpMatch(`(?m)^\s*ping idle avg\s+100 \(0\.25\)\s+200 \(0\.50\)\s+400\s*$`, text) {
		t.Errorf("variants against vhost wrong:\n%s", text)
	}
	// A variant whose tx64 is not run (--only) still has its table.
	o.Only = []string{"rx64", "rx64@batch"}
	exps, err := o.cells(&runner{})
	if err != nil {
		t.Fatal(err)
	}
	rep.plan(exps)
	if v := rep.variants(); !slices.Equal(v, []string{"batch"}) {
		t.Errorf("variants with --only rx64,rx64@batch: %q", v)
	}
	if strings.Contains(text, "tx64@batch") {
		t.Errorf("a variant's row is in the main table:\n%s", text)
	}
}

// The paired ratio is the median of the rounds' own ratios, over the
// rounds where both systems' runs worked; the table has the qemu-vhost
// column, its ratio and both paired ratios.
func TestPairedRatioAndVhostColumn(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights = nil, nil
	o.Only = []string{"tx64"}
	host := kvm.Host{Usable: true}
	rep := newReport(o, host, map[System]systemState{
		SysTinyvmm: {Label: "tinyvmm", Comparable: true}, SysCeiling: {Label: "ceiling", Comparable: true},
		SysQEMUVhost: {Label: "QEMU+vhost (KVM)", Comparable: true}, SysQEMU: {Label: "QEMU (KVM)", Comparable: true},
	})
	exps, err := o.cells(&runner{})
	if err != nil {
		t.Fatal(err)
	}
	rep.plan(exps)
	// Rounds: tinyvmm/vhost 2, 1, (failed), 4, 3: paired median 2.5,
	// while the medians' ratio is 300/150 = 2.
	tv := []float64{200, 100, 0, 400, 300}
	vh := []float64{100, 100, 50, 100, 100}
	for i := range tv {
		s := Sample{Value: tv[i]}
		if tv[i] == 0 {
			s = Sample{Err: "boom"}
		}
		rep.add(exps[0], SysTinyvmm, s)
		rep.add(exps[0], SysQEMUVhost, Sample{Value: vh[i]})
		rep.add(exps[0], SysQEMU, Sample{Value: 50})
	}
	rep.finish(time.Second)
	if got := rep.pairedRatio("tx64", "", SysTinyvmm, SysQEMUVhost); got != "2.50" {
		t.Errorf("paired tinyvmm/vhost = %s, want 2.50", got)
	}
	if got := rep.ratio("tx64", "", SysTinyvmm, SysQEMUVhost); got != "2.50" { // 250/100
		t.Errorf("tinyvmm/vhost = %s, want 2.50", got)
	}
	if got := rep.pairedRatio("tx64", "", SysTinyvmm, SysQEMU); got != "5.00" {
		t.Errorf("paired tinyvmm/QEMU = %s, want 5.00", got)
	}
	var out bytes.Buffer
	rep.printTable(&out)
	for _, want := range []string{"QEMU+vhost (KVM)", "tinyvmm/vhost", "paired /vhost", "2.50", "5.00"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// A Linux run whose last measurement failed keeps the ones before it: its
// medians count them, a paired ratio skips the measurement it lacks (and
// does not read it as 0), and the failures list says it failed partly.
func TestPartialLinuxRunPairsWhatItHas(t *testing.T) {
	ok := func(rx, tx float64) Sample {
		return Sample{Value: rx, Detail: map[string]float64{"tcp_rx_mbps": rx, "udp_tx_pps": tx}}
	}
	partial := Sample{Value: 100, Detail: map[string]float64{"tcp_rx_mbps": 100}, Note: "udp_tx failed, the rest not measured: killed"}
	a := &Cell{Metric: "linux", System: SysTinyvmm, Samples: []Sample{ok(100, 1000), ok(100, 1000), ok(100, 1000)}}
	b := &Cell{Metric: "linux", System: SysQEMUVhost, Samples: []Sample{ok(50, 500), partial, ok(100, 500)}}
	if got := pairedCells(a, b, "udp_tx_pps"); got != "2.00" {
		t.Errorf("paired udp_tx_pps %s, want 2.00 (the partial run skipped)", got)
	}
	if got := pairedCells(a, b, "tcp_rx_mbps"); got != "1.00" {
		t.Errorf("paired tcp_rx_mbps %s, want 1.00 (the partial run's 1.00 counted)", got)
	}
	r := &Report{Cells: []*Cell{a, b}}
	var w strings.Builder
	r.printFailures(&w)
	if !strings.Contains(w.String(), "linux qemu-vhost run 2: partly: udp_tx failed") {
		t.Errorf("failures:\n%s", w.String())
	}
}

// Every cell that takes tinyvmm flags runs as each variant too: tx 1400 B
// and pktgen's rx included.
func TestVariantOfEveryVariableCell(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights, o.Polls = nil, nil, nil
	o.Variants = []Variant{{Name: "fast", Args: []string{"--worker-batch"}}}
	o.Only = []string{"tx1400", "tx1400@fast", "rx64pg", "rx64pg@fast", "linux", "linux@fast"}
	exps, err := o.cells(&runner{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range exps {
		keys = append(keys, e.Key)
	}
	slices.Sort(keys)
	if want := []string{"linux", "linux@fast", "rx64pg", "rx64pg@fast", "tx1400", "tx1400@fast"}; !slices.Equal(keys, want) {
		t.Errorf("cells %q, want %q", keys, want)
	}
}

// A variant's cell is its cell's, run on tinyvmm only with the variant's
// flags; a cell that takes no flags has no variant.
func TestVariantCells(t *testing.T) {
	var got [][]string
	run := func(_ System, a []string) Sample { got = append(got, a); return Sample{} }
	cells := []experiment{
		variable("tx64", "tx", "pps", []System{SysTinyvmm, SysQEMU}, run),
		{Key: "kick1", Title: "kick", Unit: "pps", Systems: []System{SysTinyvmm}, run: func(System) Sample { return Sample{} }},
	}
	vs := []Variant{{Name: "a", Args: []string{"--x"}}, {Name: "b", Args: []string{"--y", "--z"}}}
	out := variantCells(cells, vs)
	if len(out) != 2 || out[0].Key != "tx64@a" || out[1].Key != "tx64@b" {
		t.Fatalf("variant cells %+v, want tx64@a and tx64@b", out)
	}
	for _, e := range out {
		if e.Title != "tx" || e.Unit != "pps" || !slices.Equal(e.Systems, []System{SysTinyvmm}) {
			t.Errorf("%s: %q %q %v, want the cell's title and unit on tinyvmm only", e.Key, e.Title, e.Unit, e.Systems)
		}
		e.run(SysTinyvmm)
	}
	cells[0].run(SysQEMU)
	if want := [][]string{{"--x"}, {"--y", "--z"}, nil}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("flags given %q, want %q", got, want)
	}
}

// The per-thread table: per cell and VMM each thread's host CPU, wait,
// wakeups and preemptions per frame, medians over the runs, the busiest
// thread first; a Linux cell per measurement.
func TestTablePerThread(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights = nil, nil
	o.Only = []string{"tx64", "linux"}
	host := kvm.Host{Usable: true}
	st := detectSystems(o, host)
	st[SysTinyvmm] = systemState{Label: "tinyvmm", Comparable: true}
	st[SysQEMUVhost] = systemState{Label: "QEMU+vhost", Comparable: true}
	rep := newReport(o, host, st)
	exps, err := o.cells(&runner{})
	if err != nil {
		t.Fatal(err)
	}
	rep.plan(exps)
	for _, e := range exps {
		for _, cpu := range []float64{2, 3, 40} { // median 3
			switch e.Key {
			case "tx64":
				rep.add(e, SysTinyvmm, Sample{Value: 1, Detail: map[string]float64{
					"host_cpu_us_per_frame:vcpu0": cpu, "host_cpu_us_per_frame:net-tap0": 2 * cpu,
					"runq_wait_us_per_frame:net-tap0": 0.5, "wakeups_per_frame:net-tap0": 0.0126, "preemptions_per_frame:net-tap0": 0.001}})
				rep.add(e, SysQEMUVhost, Sample{Value: 1, Detail: map[string]float64{"host_cpu_us_per_frame:vhost": cpu}})
			case "linux":
				rep.add(e, SysTinyvmm, Sample{Value: 1, Detail: map[string]float64{"udp_rx_host_cpu_us_per_frame:vcpu0": 10 * cpu, "udp_rx_runq_wait_us_per_frame:vcpu0": 1}})
			}
		}
	}
	rep.add(exps[0], SysQEMU, Sample{Err: "boom"}) // a cell with no run that worked has no rows
	rep.finish(time.Second)
	var out bytes.Buffer
	rep.printPerThread(&out)
	text := out.String()
	for _, re := range []string{
		`(?m)^\s*cell\s+system\s+thread\s+host us\s+wait us\s+wakeups\s+preempts\s*$`,
		`(?m)^\s*tx64\s+tinyvmm\s+net-tap0\s+6\.0\s+0\.5\s+0\.013\s+0\.001\s*$`,
		`(?m)^\s+vcpu0\s+3\.0\s+-\s+-\s+-\s*$`,
		`(?m)^\s*tx64\s+qemu-vhost\s+vhost\s+3\.0\s+-\s+-\s+-\s*$`,
		`(?m)^\s*linux udp_rx\s+tinyvmm\s+vcpu0\s+30\.0\s+1\.0\s+-\s+-\s*$`,
	} {
		if !regexpMatch(re, text) {
			t.Errorf("no line %s in:\n%s", re, text)
		}
	}
	if strings.Contains(text, "tcp_rx") || strings.Contains(text, "qemu ") {
		t.Errorf("rows without data:\n%s", text)
	}
	if i, j := strings.Index(text, "net-tap0"), strings.Index(text, "vcpu0"); i > j {
		t.Errorf("the busiest thread is not first:\n%s", text)
	}
	var empty bytes.Buffer
	newReport(o, host, st).printPerThread(&empty)
	if empty.Len() != 0 {
		t.Errorf("a report without threads: %q", empty.String())
	}
	// Without a plan (a report read back from e2e.json) in the cells' order.
	unplanned := newReport(o, host, st)
	unplanned.add(exps[0], SysTinyvmm, Sample{Value: 1, Detail: map[string]float64{"host_cpu_us_per_frame:vcpu0": 7}})
	unplanned.finish(time.Second)
	var back bytes.Buffer
	unplanned.printPerThread(&back)
	if !regexpMatch(`(?m)^\s*tx64\s+tinyvmm\s+vcpu0\s+7\.0\s+-\s+-\s+-\s*$`, back.String()) {
		t.Errorf("unplanned:\n%s", back.String())
	}
}
