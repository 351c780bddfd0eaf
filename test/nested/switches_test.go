package nested

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// switchTrace writes perf script's switch lines for a CPU's timeline:
// each step is who ran from its time to the next step's, and whether it
// was still runnable when it went out.
type step struct {
	comm      string
	pid, tid  int
	at        float64
	preempted bool
}

func switchTrace(cpu int, steps []step) string {
	var b strings.Builder
	for i, s := range steps[:len(steps)-1] {
		next := steps[i+1]
		fmt.Fprintf(&b, "%16s %5d/%-5d [%03d] %12.6f: PERF_RECORD_SWITCH_CPU_WIDE IN           prev pid/tid: %5d/%-5d\n",
			s.comm, s.pid, s.tid, cpu, s.at, 0, 0)
		pre := "       "
		if s.preempted {
			pre = "preempt"
		}
		fmt.Fprintf(&b, "%16s %5d/%-5d [%03d] %12.6f: PERF_RECORD_SWITCH_CPU_WIDE OUT %s  next pid/tid: %5d/%-5d\n",
			s.comm, s.pid, s.tid, cpu, next.at, pre, next.pid, next.tid)
	}
	return b.String()
}

func TestSummarizeSwitchesSplitsATurnByWhoseTime(t *testing.T) {
	lab := func(at float64, pre bool) step { return step{"tinyvmm-lab", 50, 51, at, pre} }
	idle := func(at float64) step { return step{"swapper", 0, 0, at, true} }
	trace := switchTrace(0, []step{
		// tinyvmm: the pinger sleeps before its worker runs, twice.
		lab(1.0, false), {"net-tap0", 100, 101, 1.0005, false}, idle(1.0008),
		{"net-tap0", 100, 101, 1.001, false}, {"tinyvmm", 100, 102, 1.0013, false},
		lab(1.0014, false), idle(1.0015),
		// vhost: its worker takes the CPU from the running pinger.
		lab(2.0, true), {"vhost-200", 300, 300, 2.0004, false}, lab(2.0005, true),
		{"vhost-200", 300, 300, 2.0007, false}, {"CPU 0/KVM", 200, 201, 2.0008, false},
		lab(2.0009, false), idle(2.001), idle(2.02),
	})
	var out strings.Builder
	if err := SummarizeSwitches(strings.NewReader(trace), 2*time.Millisecond, &out); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 12 && (f[0] == "net-tap0" || f[0] == "vhost-200") {
			rows[f[0]] = f
		}
	}
	// device thread, cpu, from, turns, device, vmm, vcpu, other, idle, span, switches, preempt%
	want := map[string][]string{
		"net-tap0":  {"net-tap0", "0", "1.00", "1", "600", "100", "0", "600", "200", "1500", "6.0", "0.0"},
		"vhost-200": {"vhost-200", "0", "2.00", "1", "200", "0", "100", "700", "0", "1000", "6.0", "100.0"},
	}
	for k, w := range want {
		if got := rows[k]; strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("%s: got %q\nwant %q\n%s", k, got, w, out.String())
		}
	}
}

func TestSummarizeSwitchesWantsSwitchRecords(t *testing.T) {
	err := SummarizeSwitches(strings.NewReader("perf 42/42 [000] 1.0: 1 cpu-clock: ffffffff81000000\n"), time.Millisecond, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "--switch-events") {
		t.Errorf("got %v; want an error that names --switch-events", err)
	}
}

func TestSummarizeWindowCountsSwitchesPerUnit(t *testing.T) {
	trace := switchTrace(0, []step{
		{"vcpu0", 100, 101, 1.0, true}, {"net-user0", 100, 102, 1.001, false},
		{"tinyvmm-usernet", 200, 201, 1.002, false}, {"tinyvmm-usernet", 200, 202, 1.003, false},
		{"vcpu0", 100, 101, 1.004, true}, {"net-user0", 100, 102, 1.005, false},
		{"tinyvmm-usernet", 200, 201, 1.006, false}, {"vcpu0", 100, 101, 1.007, false},
		{"swapper", 0, 0, 1.008, true}, {"vcpu0", 100, 101, 5.0, false}, {"swapper", 0, 0, 5.001, true},
	})
	var out strings.Builder
	if err := SummarizeWindow(strings.NewReader(trace), 0.5, 2, 2, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"per unit of 2: 3.5 switches", // 8 runs inside the window: 7 switches from one to the next
		"tinyvmm-usernet          1.50    1.5        0.0        2",
		"vcpu0                    1.50    1.5        1.0        1",
		"net-user0                1.00    1.0        0.0        1",
		"tinyvmm-usernet      -> tinyvmm-usernet         0.5",
		"vcpu0                -> net-user0               1.0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if err := SummarizeWindow(strings.NewReader(trace), 10, 11, 1, &out); err == nil {
		t.Error("an empty window: no error")
	}
}
