package usernetbench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"tinyvmm/bench/kvmstat"
	"tinyvmm/internal/schedstat"
	"tinyvmm/userproc"
)

// threadStat is what the kernel says of one thread: its context switches,
// voluntary (it blocked: each a wakeup later) and not (preempted), and
// the CPU time it ran.
type threadStat struct {
	group      string // process:thread name
	vol, invol uint64
	runNs      uint64
}

// readThread reads /proc/pid/task/tid; ok is false once it is gone.
func readThread(pid, tid int) (threadStat, bool) {
	t, err := schedstat.ReadThread("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid))
	if errors.Is(err, schedstat.ErrEnded) {
		return threadStat{}, false
	}
	proc, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return threadStat{
		group: threadGroup(strings.TrimSpace(string(proc)), t.Name),
		vol:   t.Voluntary, invol: t.Involuntary,
		runNs: t.RunNs,
	}, true
}

// threadGroup names a thread by its process and its own name; Go threads
// the program did not name carry the process's, and count as one group.
func threadGroup(proc, thread string) string {
	if thread == proc || thread == "" {
		return proc
	}
	return proc + ":" + thread
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The parent is the second field after the name's closing
		// parenthesis.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				out = append(out, p)
			}
		}
	}
	return out
}

// snapshot is every thread of the processes under the roots (roots
// included) and of this process (the benchmark's servers), keyed by tid.
func snapshot(roots ...int) map[int]threadStat {
	out := map[int]threadStat{}
	pids := []int{os.Getpid()}
	for queue := slices.Clone(roots); len(queue) > 0; queue = queue[1:] {
		pids = append(pids, queue[0])
		queue = append(queue, children(queue[0])...)
	}
	for _, pid := range pids {
		ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ts, ok := readThread(pid, tid); ok {
				if pid == os.Getpid() {
					ts.group = "bench"
				}
				out[tid] = ts
			}
		}
	}
	return out
}

// groupDelta is what the threads of one group did between two snapshots.
type groupDelta struct {
	group      string
	threads    int
	vol, invol uint64
	runNs      uint64
	each       []threadDelta // its threads, the most voluntary switches first
}

// threadDelta is one thread's part of a groupDelta.
type threadDelta struct {
	tid        int
	vol, invol uint64
	runNs      uint64
}

// diff sums after-before by group (threads born in between count from
// 0), the busiest group first.
func diff(before, after map[int]threadStat) []groupDelta {
	by := map[string]*groupDelta{}
	for tid, a := range after {
		b := before[tid]
		g := by[a.group]
		if g == nil {
			g = &groupDelta{group: a.group}
			by[a.group] = g
		}
		t := threadDelta{tid: tid, vol: a.vol - min(b.vol, a.vol), invol: a.invol - min(b.invol, a.invol), runNs: a.runNs - min(b.runNs, a.runNs)}
		g.threads++
		g.vol += t.vol
		g.invol += t.invol
		g.runNs += t.runNs
		g.each = append(g.each, t)
	}
	var out []groupDelta
	for _, g := range by {
		slices.SortFunc(g.each, func(x, y threadDelta) int {
			if x.vol != y.vol {
				if x.vol > y.vol {
					return -1
				}
				return 1
			}
			return x.tid - y.tid
		})
		out = append(out, *g)
	}
	slices.SortFunc(out, func(x, y groupDelta) int {
		if x.runNs != y.runNs {
			if x.runNs > y.runNs {
				return -1
			}
			return 1
		}
		return strings.Compare(x.group, y.group)
	})
	return out
}

// schedWatch is a boot's console: it keeps what the guest prints and, at
// each "cell NAME" line and at the end of the script, snapshots the
// threads of the system under test, so that each cell's context switches
// and CPU time can be told apart.
type schedWatch struct {
	mu      sync.Mutex
	out     strings.Builder
	line    []byte
	pid     int   // the system's process, 0 until it started
	also    []int // processes of the system that are not under pid (passt)
	cell    string
	at      map[int]threadStat
	results []cellSched
	// signalChild sends tinyvmm-usernet SIGUSR1 at each marker: with
	// userproc.ProfileEnv it then starts a profile file per cell.
	signalChild bool

	// KVM's counters of the system's VM (debugfs, where the host has
	// it), opened at the first marker, when the VM exists.
	vm    *kvmstat.VM
	vmErr error
	kvmAt kvmstat.Counts
}

// cellSched is one cell's threads.
type cellSched struct {
	cell   string
	groups []groupDelta
	kvm    kvmstat.Counts // KVM's counters' deltas, if read at both ends
}

func (w *schedWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.Write(p)
	for _, c := range p {
		if c != '\n' {
			if len(w.line) < 256 {
				w.line = append(w.line, c)
			}
			continue
		}
		w.marker(strings.TrimSpace(string(w.line)))
		w.line = w.line[:0]
	}
	return len(p), nil
}

// CellsDone is the line with which the guest's script (withSchedEnd)
// closes its last cell while the system is still whole: at the script's
// end, its process and threads may already be going.
const CellsDone = "cells done"

// marker closes the cell in progress at a cell's line, CellsDone or the
// script's end, and opens the next.
func (w *schedWatch) marker(line string) {
	next, isCell := strings.CutPrefix(line, "cell ")
	if !isCell && line != CellsDone && !strings.HasSuffix(line, "BENCH-USERNET-DONE") || w.pid == 0 {
		return
	}
	now := snapshot(append([]int{w.pid}, w.also...)...)
	if w.signalChild {
		signalUsernet(w.pid)
	}
	if w.vm == nil && w.vmErr == nil {
		w.vm, w.vmErr = kvmstat.Open(kvmstat.DebugFS, "/proc", w.pid)
	}
	var kc kvmstat.Counts
	if w.vm != nil {
		kc, _ = w.vm.Read()
	}
	if w.cell != "" {
		w.results = append(w.results, cellSched{cell: w.cell, groups: diff(w.at, now), kvm: subCounts(kc, w.kvmAt)})
	}
	w.cell, w.at, w.kvmAt = "", now, kc
	if isCell {
		w.cell = next
	}
}

// withSchedEnd has script print CellsDone after its last cell and wait a
// second before it ends, so that the last cell's snapshot finds the
// system's threads (a VMM's child, QEMU's vCPU) still there.
func withSchedEnd(script string) string {
	end := " && echo BENCH-USERNET-DONE"
	if !strings.HasSuffix(script, end) {
		return script
	}
	return strings.TrimSuffix(script, end) + " && echo " + CellsDone + " && sleep 1" + end
}

// start names the system's process, and any of its others that are not
// its descendants (qemu-passt's passt, the benchmark's child).
func (w *schedWatch) start(pid int, also ...int) {
	w.mu.Lock()
	w.pid, w.also = pid, also
	w.mu.Unlock()
}

// close lets the VM's counters go.
func (w *schedWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.vm != nil {
		w.vm.Close()
		w.vm = nil
	}
}

// subCounts is after - before (kvmstat's Sub), nil where either end or
// the difference is missing.
func subCounts(after, before kvmstat.Counts) kvmstat.Counts {
	if after == nil || before == nil {
		return nil
	}
	d, err := after.Sub(before)
	if err != nil {
		return nil
	}
	return d
}

func (w *schedWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// report writes each cell's threads: switches and CPU time per group, and
// per unit of the cell's work (units: what one cell did, e.g. 50 round
// trips).
func (w *schedWatch) report(out io.Writer, sys string, run int, units map[string]float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.vmErr != nil {
		fmt.Fprintf(out, "  sched %s run %d: no KVM counters: %v\n", sys, run, w.vmErr)
	}
	for _, c := range w.results {
		u := units[c.cell]
		fmt.Fprintf(out, "  sched %s run %d, cell %s (per %s):\n", sys, run, c.cell, unitName(c.cell))
		if c.kvm != nil {
			fmt.Fprintf(out, "    kvm per %s:", unitName(c.cell))
			for _, k := range kvmstat.Names {
				if v, ok := c.kvm[k]; ok && u > 0 {
					fmt.Fprintf(out, " %s %.1f", k, float64(v)/u)
				}
			}
			fmt.Fprintln(out)
		}
		for _, g := range c.groups {
			if g.vol+g.invol == 0 && g.runNs == 0 {
				continue
			}
			per := func(v float64) float64 {
				if u <= 0 {
					return 0
				}
				return v / u
			}
			fmt.Fprintf(out, "    %-32s %3d thr  vol %8d  invol %7d  cpu %8.1f ms | per: vol %7.2f invol %6.2f cpu %8.1f us\n",
				g.group, g.threads, g.vol, g.invol, float64(g.runNs)/1e6,
				per(float64(g.vol)), per(float64(g.invol)), per(float64(g.runNs)/1e3))
			if len(g.each) < 2 {
				continue
			}
			// Unnamed threads (a Go program's Ms) one by one: which of
			// them blocks and wakes.
			for _, t := range g.each {
				if t.vol*10 < g.vol && t.runNs*10 < g.runNs {
					continue
				}
				fmt.Fprintf(out, "      tid %-26d vol %8d  invol %7d  cpu %8.1f ms | per: vol %7.2f invol %6.2f cpu %8.1f us\n",
					t.tid, t.vol, t.invol, float64(t.runNs)/1e6,
					per(float64(t.vol)), per(float64(t.invol)), per(float64(t.runNs)/1e3))
			}
		}
	}
}

// unitName is what a cell's per-unit numbers are per.
func unitName(cell string) string {
	switch cell {
	case "g2h":
		return "KiB sent (one nc write)"
	case "h2g":
		return "MiB"
	case "rr":
		return "connection"
	case "dns":
		return "lookup"
	}
	return "cell"
}

// signalUsernet sends SIGUSR1 to each tinyvmm-usernet under pid.
func signalUsernet(pid int) {
	for _, c := range children(pid) {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(c) + "/comm")
		if strings.TrimSpace(string(comm)) == userproc.Program {
			syscall.Kill(c, syscall.SIGUSR1)
		}
	}
}
