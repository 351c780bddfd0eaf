package bootbench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"tinyvmm/internal/hostinfo"
	"tinyvmm/internal/stats"

	"tinyvmm/vmm"
)

// System is one VMM set-up the benchmark boots.
type System string

// The systems, in table order.
const (
	SysTinyvmm System = "tinyvmm"
	// SysTinyvmmUser is tinyvmm with --net user: its set-up starts the
	// user network's process first and waits for it before the vCPUs run
	// ("user nets ready").
	SysTinyvmmUser System = "tinyvmm-user"
	SysMicrovm     System = "qemu-microvm"
	SysQ35         System = "qemu-q35"
	// SysFloor is no VMM: kvmprobe (test/nested/kvmprobe), a small Go
	// program that makes a VM with one memory slot and one vCPU and runs it,
	// so its spawn to first KVM_RUN is what any Go VMM pays on this host
	// (exec, Go's runtime, KVM's VM and vCPU) before a set-up of its own.
	// It boots no kernel: only that milestone and the total mean anything.
	SysFloor System = "kvm-floor"
)

// AllSystems lists every system in table order.
var AllSystems = []System{SysTinyvmm, SysTinyvmmUser, SysMicrovm, SysQ35, SysFloor}

// Run is one boot: every time is in seconds from the moment the benchmark
// started the VMM process (fork and exec included). A milestone the system
// cannot show is absent.
type Run struct {
	Index int    `json:"run"`
	Err   string `json:"error,omitempty"`
	// TotalS is until the VMM process was reaped.
	TotalS float64 `json:"total_s"`
	// FirstRunS is the first KVM_RUN (tinyvmm's own timestamp).
	FirstRunS *float64 `json:"first_kvm_run_s,omitempty"`
	// KernelS is the kernel's entry: tinyvmm enters the kernel's PVH entry
	// with its first KVM_RUN; QEMU's firmware jumps there after its last
	// fw_cfg access (its trace log).
	KernelS *float64 `json:"kernel_entry_s,omitempty"`
	// InitS is the boot timer byte that /init writes as it starts.
	InitS *float64 `json:"init_s,omitempty"`
	// ExitS is the guest's exit as the VMM saw it (QEMU exits at once, so
	// it is absent there and TotalS stands for it).
	ExitS *float64 `json:"exit_s,omitempty"`
	// ExitsAtInit are KVM's exit counters when /init started.
	ExitsAtInit map[string]uint64 `json:"exits_at_init,omitempty"`
	// PeakRSSKiB and GuestKiB are VmHWM and the guest RAM resident when
	// /init started.
	PeakRSSKiB int64 `json:"peak_rss_kib_at_init,omitempty"`
	GuestKiB   int64 `json:"guest_touched_kib_at_init,omitempty"`
	// Setup is tinyvmm's own account of its set-up steps.
	Setup []vmm.SetupStep `json:"setup_ms,omitempty"`
}

// Milestones and phases, by the names boot.json uses.
var (
	milestones = []string{"first_kvm_run", "kernel_entry", "init", "exit", "total"}
	phases     = []string{"to_kernel_entry", "kernel_to_init", "init_to_exit", "exit_to_reaped"}
)

func (r Run) milestone(name string) (float64, bool) {
	var p *float64
	switch name {
	case "first_kvm_run":
		p = r.FirstRunS
	case "kernel_entry":
		p = r.KernelS
	case "init":
		p = r.InitS
	case "exit":
		if r.ExitS == nil {
			return r.TotalS, true
		}
		p = r.ExitS
	case "total":
		return r.TotalS, true
	}
	if p == nil {
		return 0, false
	}
	return *p, true
}

// phaseSpans are each phase's milestones, from and to ("" is the spawn).
var phaseSpans = map[string][2]string{
	"to_kernel_entry": {"", "kernel_entry"},
	"kernel_to_init":  {"kernel_entry", "init"},
	"init_to_exit":    {"init", "exit"},
	"exit_to_reaped":  {"exit", "total"},
}

// phase is the time between two milestones of one run.
func (r Run) phase(name string) (float64, bool) {
	span, ok := phaseSpans[name]
	if !ok {
		return 0, false
	}
	from, to := span[0], span[1]
	b, ok := r.milestone(to)
	if !ok {
		return 0, false
	}
	a := 0.0
	if from != "" {
		if a, ok = r.milestone(from); !ok {
			return 0, false
		}
	}
	return b - a, true
}

// exitCounter says which KVM counters are exits by reason.
func exitCounter(name string) bool {
	return name == "exits" || strings.HasSuffix(name, "_exits") ||
		name == "hypercalls" || name == "insn_emulation" || name == "pf_taken"
}

// Result is one system's runs and their medians.
type Result struct {
	System  System   `json:"system"`
	Command []string `json:"command"`
	OK      int      `json:"ok_runs"`
	Failed  int      `json:"failed_runs"`
	Skipped string   `json:"skipped,omitempty"`
	// MedianS has each milestone's median, seconds from the spawn.
	MedianS map[string]float64 `json:"median_s"`
	// PhaseMedianS has each phase's median (of the per-run differences).
	PhaseMedianS map[string]float64 `json:"phase_median_s"`
	// ExitsAtInit has the median count of each exit counter.
	ExitsAtInit map[string]float64 `json:"exits_at_init_median,omitempty"`
	// RSSOverheadMiB is the median of peak RSS minus guest RAM touched.
	RSSOverheadMiB *float64 `json:"vmm_rss_overhead_mib_median,omitempty"`
	// SetupMedianMs is the median of each of tinyvmm's set-up steps.
	SetupMedianMs []vmm.SetupStep `json:"setup_median_ms,omitempty"`
	Runs          []Run           `json:"runs"`
}

// summarize fills the medians from the runs that succeeded.
func (s *Result) summarize() {
	s.OK, s.Failed = 0, 0
	var ok []Run
	for _, r := range s.Runs {
		if r.Err != "" {
			s.Failed++
			continue
		}
		ok = append(ok, r)
	}
	s.OK = len(ok)
	s.MedianS, s.PhaseMedianS, s.ExitsAtInit, s.RSSOverheadMiB = map[string]float64{}, map[string]float64{}, nil, nil
	for _, m := range milestones {
		if v, ok := medianOf(ok, func(r Run) (float64, bool) { return r.milestone(m) }); ok {
			s.MedianS[m] = v
		}
	}
	for _, p := range phases {
		if v, ok := medianOf(ok, func(r Run) (float64, bool) { return r.phase(p) }); ok {
			s.PhaseMedianS[p] = v
		}
	}
	names := map[string]bool{}
	for _, r := range ok {
		for n := range r.ExitsAtInit {
			if exitCounter(n) {
				names[n] = true
			}
		}
	}
	for n := range names {
		v, _ := medianOf(ok, func(r Run) (float64, bool) {
			c, ok := r.ExitsAtInit[n]
			return float64(c), ok
		})
		if s.ExitsAtInit == nil {
			s.ExitsAtInit = map[string]float64{}
		}
		s.ExitsAtInit[n] = v
	}
	s.SetupMedianMs = nil
	if len(ok) > 0 {
		for i, st := range ok[0].Setup {
			v, _ := medianOf(ok, func(r Run) (float64, bool) {
				if i < len(r.Setup) && r.Setup[i].Step == st.Step {
					return r.Setup[i].Ms, true
				}
				return 0, false
			})
			s.SetupMedianMs = append(s.SetupMedianMs, vmm.SetupStep{Step: st.Step, Ms: v})
		}
	}
	if v, ok := medianOf(ok, func(r Run) (float64, bool) {
		return float64(r.PeakRSSKiB-r.GuestKiB) / 1024, r.PeakRSSKiB > 0
	}); ok {
		s.RSSOverheadMiB = &v
	}
}

// medianOf is the median of f over the runs where it has a value.
func medianOf(runs []Run, f func(Run) (float64, bool)) (float64, bool) {
	var xs []float64
	for _, r := range runs {
		if v, ok := f(r); ok {
			xs = append(xs, v)
		}
	}
	return median(xs)
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	return stats.Median(xs), true
}

// Report is boot.json.
type Report struct {
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	Runs    int       `json:"runs_per_system"`
	Kernel  string    `json:"kernel"`
	Initrd  string    `json:"initrd"`
	MemMiB  int       `json:"mem_mib"`
	Cmdline string    `json:"guest_cmdline"`
	Took    string    `json:"took"`
	Systems []*Result `json:"systems"`
}

// Machine says where the numbers come from.
type Machine = hostinfo.Info

func describeMachine() Machine { return hostinfo.Describe() }

func (r *Report) summarize() {
	for _, s := range r.Systems {
		s.summarize()
	}
}

// WriteJSON writes the report to file.
func (r *Report) WriteJSON(file string) error {
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(j, '\n'), 0o644)
}

// ReadReport reads a boot.json (to draw it again, e.g. on the host after a
// nested run) and recomputes the medians from its runs.
func ReadReport(file string) (*Report, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	r.summarize()
	return &r, nil
}

// exitColumns are the counters the table shows, in order.
var exitColumns = []struct{ name, title string }{
	{"exits", "exits"}, {"io_exits", "io"}, {"mmio_exits", "mmio"}, {"halt_exits", "halt"},
	{"irq_window_exits", "irqwin"}, {"irq_exits", "irq"},
}

// Table prints the medians, in milliseconds, one row per system.
func (r *Report) Table(w io.Writer) {
	fmt.Fprintf(w, "tinyvmm bench boot, %s: %d interleaved runs per system, `-- true`, %d MiB, medians\n",
		r.Date.Format("2006-01-02"), r.Runs, r.MemMiB)
	fmt.Fprintf(w, "machine: %s, %d CPUs, %s, load %s\n", r.Machine.CPU, r.Machine.CPUs, r.Machine.Kernel, r.Machine.LoadAvg)
	fmt.Fprintln(w, "ms from the VMM's spawn:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "system\tok\ttotal\t1st KVM_RUN\tkernel entry\t/init\texit\tkernel->init\tRSS-guest MiB\t")
	for _, c := range exitColumns {
		fmt.Fprintf(tw, "%s\t", c.title)
	}
	fmt.Fprintln(tw)
	ms := func(m map[string]float64, k string) string {
		if v, ok := m[k]; ok {
			return fmt.Sprintf("%.0f", v*1000)
		}
		return "-"
	}
	for _, s := range r.Systems {
		if s.Skipped != "" {
			fmt.Fprintf(tw, "%s\tskipped: %s\t\n", s.System, s.Skipped)
			continue
		}
		rss := "-"
		if s.RSSOverheadMiB != nil {
			rss = fmt.Sprintf("%.1f", *s.RSSOverheadMiB)
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", s.System, s.OK, s.OK+s.Failed,
			ms(s.MedianS, "total"), ms(s.MedianS, "first_kvm_run"), ms(s.MedianS, "kernel_entry"),
			ms(s.MedianS, "init"), ms(s.MedianS, "exit"), ms(s.PhaseMedianS, "kernel_to_init"), rss)
		for _, c := range exitColumns {
			if v, ok := s.ExitsAtInit[c.name]; ok {
				fmt.Fprintf(tw, "%.0f\t", v)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if t, q := r.system(SysTinyvmm), r.system(SysMicrovm); t != nil && q != nil && t.OK > 0 && q.OK > 0 {
		fmt.Fprintf(w, "tinyvmm/microvm total: %.2f\n", t.MedianS["total"]/q.MedianS["total"])
	}
	for _, s := range r.Systems {
		if len(s.SetupMedianMs) > 0 {
			fmt.Fprintf(w, "%s set-up, median ms:", s.System)
			for _, st := range s.SetupMedianMs {
				fmt.Fprintf(w, " %s %.1f;", st.Step, st.Ms)
			}
			fmt.Fprintln(w)
		}
	}
	for _, s := range r.Systems {
		for _, run := range s.Runs {
			if run.Err != "" {
				fmt.Fprintf(w, "%s run %d failed: %s\n", s.System, run.Index, run.Err)
			}
		}
	}
}

func (r *Report) system(s System) *Result {
	for _, x := range r.Systems {
		if x.System == s {
			return x
		}
	}
	return nil
}
