package nested

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"tinyvmm/internal/stats"
)

// SwitchRecordArgs are perf record's flags for Plan.PerfSwitches (bench/nested.sh
// NESTED_SWITCHES=1): a record of every context switch on every L1 CPU
// (PERF_RECORD_SWITCH_CPU_WIDE: core perf, no tracepoints, which the L1
// kernel lacks), beside sparse cpu-clock samples.
const SwitchRecordArgs = "record -a -e cpu-clock -F 49 --switch-events"

// DefaultTurnGap ends a device thread's turn: bench e2e pings every
// 10 ms, and a round trip in L1 keeps its CPU busy for a few ms with idle
// waits of well under this inside.
const DefaultTurnGap = 2 * time.Millisecond

// switchRecord is what perf script's switch lines say: the threads, by
// tid, and what ran on each CPU, in order.
type switchRecord struct {
	threads map[int]*threadInfo
	spans   map[int][]ranSpan // by CPU
}

// name is a thread's commonest name in the record.
func (rec *switchRecord) name(tid int) string {
	if ti := rec.threads[tid]; ti != nil {
		return ti.name
	}
	return "?"
}

// readSwitches reads perf script's switch lines (SwitchScriptArgs).
func readSwitches(r io.Reader) (*switchRecord, error) {
	threads := map[int]*threadInfo{}
	spans := map[int][]ranSpan{} // by CPU
	open := map[int]ranSpan{}    // a CPU's current thread, switched in
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		m := switchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n++
		pid, _ := strconv.Atoi(m[2])
		tid, _ := strconv.Atoi(m[3])
		cpu, _ := strconv.Atoi(m[4])
		t, err := strconv.ParseFloat(m[5], 64)
		if err != nil {
			continue
		}
		ti := threads[tid]
		if ti == nil {
			ti = &threadInfo{pid: pid, names: map[string]int{}}
			threads[tid] = ti
		}
		ti.names[m[1]]++
		if m[6] == "IN" {
			open[cpu] = ranSpan{start: t, tid: tid}
			continue
		}
		if s, ok := open[cpu]; ok && s.tid == tid {
			s.end, s.preempted = t, m[7] != ""
			spans[cpu] = append(spans[cpu], s)
			delete(open, cpu)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("no switch records: want perf script %s over a perf record with --switch-events", SwitchScriptArgs)
	}
	for _, ti := range threads {
		ti.name = ti.commonest()
	}
	return &switchRecord{threads: threads, spans: spans}, nil
}

// SwitchScriptArgs are perf script's flags that print those switches as
// readSwitches reads them.
const SwitchScriptArgs = "--show-switch-events -F comm,pid,tid,cpu,time"

// A switch line of perf script with SwitchScriptArgs, as
//
//	net-tap0   131/140 [000]  66.004325: PERF_RECORD_SWITCH_CPU_WIDE OUT preempt  next pid/tid:    43/57
var switchLine = regexp.MustCompile(`^\s*(.+?)\s+(-?\d+)/(-?\d+)\s+\[(\d+)\]\s+([\d.]+):\s+PERF_RECORD_SWITCH_CPU_WIDE\s+(IN|OUT)(\s+preempt)?`)

// ranSpan is one stretch of a thread on a CPU, from its switch in to its
// switch out; preempted: it was still runnable when it went out.
type ranSpan struct {
	start, end float64 // seconds, perf's clock
	tid        int
	preempted  bool
}

// threadInfo is a thread of the record: its process, and the names perf
// gave it (a thread is renamed after it starts: vcpu0, net-tap0).
type threadInfo struct {
	pid   int
	names map[string]int // how often perf wrote each
	name  string         // the commonest of names
}

// commonest is the name perf wrote most often for the thread.
func (t *threadInfo) commonest() string {
	best, n := "", -1
	for s, c := range t.names {
		if c > n || c == n && s < best {
			best, n = s, c
		}
	}
	return best
}

// SummarizeSwitches reads perf script's switch lines (SwitchScriptArgs)
// and writes, for each device thread (tinyvmm's net-IFNAME worker, or
// vhost-PID, the kernel's worker for QEMU process PID), what ran on its
// CPU during each of its turns: a busy stretch of that CPU, between idle
// gaps longer than gap, in which the device thread ran at least twice
// (a frame in and one out, as in a ping). A ping's round trip on a CPU
// that the pinger shares with the device is about the sum of that CPU's
// work in the turn, so the table says whose time a round trip is made of:
// the device thread, the rest of its VMM (for vhost, QEMU's threads), its
// vCPU (where it is not pinned elsewhere), the other threads (the bench
// harness, the pinger, the kernel's) and the idle waits inside the turn.
// preempt% is how often the device thread, woken, took the CPU from a
// thread that was still running, rather than waiting for it to sleep.
func SummarizeSwitches(r io.Reader, gap time.Duration, w io.Writer) error {
	rec, err := readSwitches(r)
	if err != nil {
		return err
	}
	threads, spans, name := rec.threads, rec.spans, rec.name

	// The device threads, each with the CPU it ran on most.
	type device struct {
		tid, owner, cpu int
		first           float64     // its first run, perf's clock (s)
		runs            map[int]int // by CPU
	}
	byTid := map[int]*device{}
	for cpu, ss := range spans {
		for _, s := range ss {
			nm := name(s.tid)
			var owner int
			switch {
			case strings.HasPrefix(nm, "net-"):
				owner = threads[s.tid].pid
			case strings.HasPrefix(nm, "vhost-"):
				owner, _ = strconv.Atoi(strings.TrimPrefix(nm, "vhost-"))
			default:
				continue
			}
			d := byTid[s.tid]
			if d == nil {
				d = &device{tid: s.tid, owner: owner, first: s.start, runs: map[int]int{}}
				byTid[s.tid] = d
			}
			d.first = min(d.first, s.start)
			d.runs[cpu]++
		}
	}
	var devs []*device
	for _, d := range byTid {
		for cpu, n := range d.runs {
			if n > d.runs[d.cpu] || n == d.runs[d.cpu] && cpu < d.cpu {
				d.cpu = cpu
			}
		}
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].first < devs[j].first })

	classes := []string{"device", "vmm", "vcpu", "other", "idle"}
	fmt.Fprintf(w, "per turn of each device thread (a busy stretch of its CPU between idle gaps over %v with 2+ runs of it):\n", gap)
	fmt.Fprintf(w, "CPU time in us by whose (medians; vmm: its VMM's other threads; other: harness, pinger, kernel), switches per turn\n")
	fmt.Fprintf(w, "%-16s %5s %8s %6s", "device thread", "cpu", "from s", "turns")
	for _, c := range classes {
		fmt.Fprintf(w, " %7s", c)
	}
	fmt.Fprintf(w, " %7s %8s %8s\n", "span", "switches", "preempt%")
	// Each CPU's timeline in turns: busy stretches between idle gaps
	// longer than gap. A turn in which one device thread ran twice or
	// more is that thread's.
	type turnStats struct {
		turns              []map[string]float64
		switches, spansUs  []float64
		wakes, preemptions int
	}
	perThread := map[int]*turnStats{}
	for _, d := range devs {
		perThread[d.tid] = &turnStats{}
	}
	g := gap.Seconds()
	for _, ss := range spans {
		var turn []int // indexes into ss
		flush := func() {
			runs := map[int]int{}
			for _, i := range turn {
				if byTid[ss[i].tid] != nil {
					runs[ss[i].tid]++
				}
			}
			var d *device
			for tid, n := range runs {
				if n >= 2 {
					if d != nil {
						d = nil // two devices in one turn: nobody's
						break
					}
					d = byTid[tid]
				}
			}
			if d != nil {
				st, by := perThread[d.tid], map[string]float64{}
				for _, i := range turn {
					s := ss[i]
					c := "other"
					switch {
					case s.tid == d.tid:
						c = "device"
						if i > 0 {
							st.wakes++
							if p := ss[i-1]; p.preempted && p.tid != 0 {
								st.preemptions++
							}
						}
					case s.tid == 0:
						c = "idle"
					case threads[s.tid].pid == d.owner:
						c = "vmm"
						if nm := name(s.tid); strings.HasPrefix(nm, "vcpu") || strings.HasSuffix(nm, "/KVM") {
							c = "vcpu"
						}
					}
					by[c] += (s.end - s.start) * 1e6
				}
				first, last := ss[turn[0]], ss[turn[len(turn)-1]]
				st.turns = append(st.turns, by)
				st.switches = append(st.switches, float64(len(turn)))
				st.spansUs = append(st.spansUs, (last.end-first.start)*1e6)
			}
			turn = turn[:0]
		}
		for i, s := range ss {
			if s.tid == 0 && s.end-s.start > g {
				flush()
				continue
			}
			turn = append(turn, i)
		}
		flush()
	}
	for _, d := range devs {
		st := perThread[d.tid]
		fmt.Fprintf(w, "%-16s %5d %8.2f %6d", name(d.tid), d.cpu, d.first, len(st.turns))
		for _, c := range classes {
			v := make([]float64, len(st.turns))
			for i, t := range st.turns {
				v[i] = t[c]
			}
			fmt.Fprintf(w, " %7.0f", stats.Median(v))
		}
		pct := 0.0
		if st.wakes > 0 {
			pct = 100 * float64(st.preemptions) / float64(st.wakes)
		}
		fmt.Fprintf(w, " %7.0f %8.1f %8.1f\n", stats.Median(st.spansUs), meanOf(st.switches), pct)
	}
	return nil
}

// SummarizeWindow writes, for the switch lines of r between from and to
// (perf's clock, in seconds), each thread name's CPU time, runs and
// preempted runs (still runnable when it went out) per unit (the window
// holds per of them: connections, pings), and the commonest switches from
// one name to the next: where a cell's context switches are, on a CPU
// that every thread of the cell shares (the nested L1 of bench usernet).
func SummarizeWindow(r io.Reader, from, to, per float64, w io.Writer) error {
	rec, err := readSwitches(r)
	if err != nil {
		return err
	}
	if per <= 0 {
		per = 1
	}
	type group struct {
		cpu             float64
		runs, preempted int
		tids            map[int]bool
	}
	groups := map[string]*group{}
	switches := map[[2]string]int{}
	total := 0
	for _, ss := range rec.spans {
		prev := ""
		for _, s := range ss {
			if s.start < from || s.end > to {
				prev = ""
				continue
			}
			nm := rec.name(s.tid)
			g := groups[nm]
			if g == nil {
				g = &group{tids: map[int]bool{}}
				groups[nm] = g
			}
			g.cpu += s.end - s.start
			g.runs++
			g.tids[s.tid] = true
			if s.preempted {
				g.preempted++
			}
			if prev != "" {
				switches[[2]string{prev, nm}]++
				total++
			}
			prev = nm
		}
	}
	if len(groups) == 0 {
		return fmt.Errorf("no switches between %.3f and %.3f s", from, to)
	}
	names := make([]string, 0, len(groups))
	for nm := range groups {
		names = append(names, nm)
	}
	sort.Slice(names, func(i, j int) bool { return groups[names[i]].cpu > groups[names[j]].cpu })
	fmt.Fprintf(w, "%.3f-%.3f s, per unit of %g: %.1f switches\n", from, to, per, float64(total)/per)
	fmt.Fprintf(w, "%-20s %8s %6s %10s %8s\n", "thread name", "cpu ms", "runs", "preempted", "threads")
	for _, nm := range names {
		g := groups[nm]
		fmt.Fprintf(w, "%-20s %8.2f %6.1f %10.1f %8d\n", nm, 1000*g.cpu/per, float64(g.runs)/per, float64(g.preempted)/per, len(g.tids))
	}
	pairs := make([][2]string, 0, len(switches))
	for k := range switches {
		pairs = append(pairs, k)
	}
	sort.Slice(pairs, func(i, j int) bool {
		if switches[pairs[i]] != switches[pairs[j]] {
			return switches[pairs[i]] > switches[pairs[j]]
		}
		return pairs[i][0]+pairs[i][1] < pairs[j][0]+pairs[j][1]
	})
	fmt.Fprintln(w, "switches per unit, from -> to:")
	for i, k := range pairs {
		if i == 16 {
			break
		}
		fmt.Fprintf(w, "  %-20s -> %-20s %6.1f\n", k[0], k[1], float64(switches[k])/per)
	}
	return nil
}

func meanOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
