package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"tinyvmm/internal/hostinfo"
	"tinyvmm/internal/stats"

	"tinyvmm/kvm"
)

// Report is everything `bench e2e` measured, as written to e2e.json.
type Report struct {
	Date    time.Time              `json:"date"`
	Machine Machine                `json:"machine"`
	Runs    int                    `json:"runs_per_cell"`
	Secs    int                    `json:"secs_per_run"`
	Took    string                 `json:"took"`
	Systems map[System]systemState `json:"systems"`
	Cells   []*Cell                `json:"cells"`
	byKey   map[string]*Cell
	exps    []experiment
}

// Machine states where the numbers come from.
type Machine struct {
	hostinfo.Info
	KVM string `json:"kvm"`
	PVM bool   `json:"pvm"`
	// Pinning says where the vCPU ran with --pin; empty without.
	Pinning string `json:"pinning,omitempty"`
	// Switch is what an address-space switch costs here (switchcost.go).
	Switch *SwitchCost `json:"switch_cost,omitempty"`
}

// Cell is one experiment on one system: every run and their medians.
type Cell struct {
	Metric  string             `json:"metric"`
	Title   string             `json:"title"`
	Unit    string             `json:"unit"`
	System  System             `json:"system"`
	Samples []Sample           `json:"samples"`
	OK      int                `json:"ok_runs"`
	Median  float64            `json:"median"`
	Detail  map[string]float64 `json:"median_detail,omitempty"`
	// Per frame the guest moved, medians over the runs, from KVM's
	// counters of the VM in the timed window (VMM cells of tx and rx):
	// every VM exit, the guest's notify writes, the interrupts injected.
	ExitsPerFrame *float64 `json:"exits_per_frame,omitempty"`
	KicksPerFrame *float64 `json:"kicks_per_frame,omitempty"`
	IRQsPerFrame  *float64 `json:"irqs_per_frame,omitempty"`
	// HostCPUPerFrame is the VMM's CPU time outside the guest per frame,
	// in microseconds (addExits).
	HostCPUPerFrame *float64 `json:"host_cpu_us_per_frame,omitempty"`
}

func newReport(o Options, host kvm.Host, systems map[System]systemState) *Report {
	return &Report{Date: time.Now().UTC(), Machine: describeMachine(host), Runs: o.Runs, Secs: o.Secs,
		Systems: systems, byKey: map[string]*Cell{}}
}

func describeMachine(host kvm.Host) Machine {
	return Machine{Info: hostinfo.Describe(), KVM: host.String(), PVM: host.PVM}
}

// plan lists the experiments, so that rows of systems that never ran show.
func (r *Report) plan(exps []experiment) { r.exps = exps }

func (r *Report) add(e experiment, s System, smp Sample) {
	key := e.Key + "/" + string(s)
	c := r.byKey[key]
	if c == nil {
		c = &Cell{Metric: e.Key, Title: e.Title, Unit: e.Unit, System: s}
		r.byKey[key] = c
		r.Cells = append(r.Cells, c)
	}
	c.Samples = append(c.Samples, smp)
}

// finish takes the medians over the runs that worked.
func (r *Report) finish(took time.Duration) {
	r.Took = took.Round(time.Second).String()
	for _, c := range r.Cells {
		var vals []float64
		details := map[string][]float64{}
		for _, s := range c.Samples {
			if s.Err != "" {
				continue
			}
			vals = append(vals, s.Value)
			for k, v := range s.Detail {
				details[k] = append(details[k], v)
			}
		}
		c.OK = len(vals)
		if c.OK == 0 {
			continue
		}
		c.Median = stats.Median(vals)
		c.Detail = map[string]float64{}
		for k, v := range details {
			c.Detail[k] = stats.Median(v)
		}
		c.ExitsPerFrame = c.detailPtr("exits_per_frame")
		c.KicksPerFrame = c.detailPtr("kicks_per_frame")
		c.IRQsPerFrame = c.detailPtr("irqs_per_frame")
		c.HostCPUPerFrame = c.detailPtr("host_cpu_us_per_frame")
	}
}

func (c *Cell) detailPtr(k string) *float64 {
	if v, ok := c.Detail[k]; ok {
		return &v
	}
	return nil
}

func (r *Report) cell(metric string, s System) *Cell { return r.byKey[metric+"/"+string(s)] }

// value is a cell's text: the median, its failures, or why it did not run.
func (r *Report) value(metric string, s System, detail string) (string, float64, bool) {
	if r.Systems[s].Skip != "" {
		return "skipped", 0, false
	}
	c := r.cell(metric, s)
	if c == nil {
		return "-", 0, false
	}
	if c.OK == 0 {
		return fmt.Sprintf("FAILED (%d/%d)", len(c.Samples), len(c.Samples)), 0, false
	}
	v := c.Median
	if detail != "" {
		v = c.Detail[detail]
	}
	txt := formatNumber(v)
	if c.OK < len(c.Samples) {
		txt += fmt.Sprintf(" (%d/%d failed)", len(c.Samples)-c.OK, len(c.Samples))
	}
	return txt, v, true
}

func formatNumber(v float64) string {
	switch {
	case v >= 100:
		s := fmt.Sprintf("%.0f", v)
		var b strings.Builder
		for i, ch := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(ch)
		}
		return b.String()
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func (r *Report) ratio(metric, detail string, a, b System) string {
	if !r.Systems[b].Comparable {
		return "n/c"
	}
	_, va, oka := r.value(metric, a, detail)
	_, vb, okb := r.value(metric, b, detail)
	if !oka || !okb || vb == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", va/vb)
}

// pairedRatio is the median over the rounds of a/b, each round's runs of
// the two systems taken together (they ran back to back), over the rounds
// where both worked: it cancels the load that moves both alike.
func (r *Report) pairedRatio(metric, detail string, a, b System) string {
	if !r.Systems[b].Comparable || r.Systems[a].Skip != "" || r.Systems[b].Skip != "" {
		return "-"
	}
	return pairedCells(r.cell(metric, a), r.cell(metric, b), detail)
}

// pairedCells is pairedRatio of two cells.
func pairedCells(ca, cb *Cell, detail string) string {
	if ca == nil || cb == nil {
		return "-"
	}
	var ratios []float64
	for i := range min(len(ca.Samples), len(cb.Samples)) {
		sa, sb := ca.Samples[i], cb.Samples[i]
		if sa.Err != "" || sb.Err != "" {
			continue
		}
		va, vb := sa.Value, sb.Value
		if detail != "" {
			var oka, okb bool
			va, oka = sa.Detail[detail]
			vb, okb = sb.Detail[detail]
			if !oka || !okb {
				continue // a measurement that did not run in one of the two
			}
		}
		if vb > 0 {
			ratios = append(ratios, va/vb)
		}
	}
	if len(ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", stats.Median(ratios))
}

type row struct{ metric, detail, title string }

func (r *Report) printTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\ntinyvmm bench e2e, %s (took %s)\n", r.Date.Format("2006-01-02 15:04 MST"), r.Took)
	fmt.Fprintf(w, "machine: %s, %s, %d CPUs, %s, load %s\n", m.Host, m.CPU, m.CPUs, m.Kernel, m.LoadAvg)
	fmt.Fprintf(w, "KVM: %s\n", m.KVM)
	if m.Pinning != "" {
		fmt.Fprintf(w, "CPUs: %s\n", m.Pinning)
	}
	if m.Switch != nil {
		fmt.Fprintf(w, "switches: %s\n", m.Switch)
	}
	fmt.Fprintf(w, "each cell: median of %d runs interleaved between systems, %d s per run; ratios: tinyvmm / other (n/c: not comparable)\n\n",
		r.Runs, r.Secs)
	systems := []System{SysTinyvmm, SysCeiling, SysQEMUVhost, SysQEMU}
	rows := []row{
		{"tx64", "", "guest->host pps, 64 B"},
		{"tx1400", "", "guest->host pps, 1400 B"},
		{"rx64", "", "host->guest pps, 64 B"},
		{"rx64irq", "", "host->guest pps, 64 B, guest irqs"},
		{"rx64pg", "", "host->guest pps, 64 B, pktgen"},
	}
	if r.hasPrefix("linux") {
		rows = append(rows, []row{
			{"linux", "tcp_rx_mbps", "Linux TCP host->guest Mbit/s"},
			{"linux", "tcp_tx_mbps", "Linux TCP guest->host Mbit/s"},
			{"linux", "udp_rx_pps", fmt.Sprintf("Linux UDP %d B host->guest pps", lxUDPSize)},
			{"linux", "udp_tx_pps", fmt.Sprintf("Linux UDP %d B guest->host pps", lxUDPSize)},
			{"linux", "rr_tps", "Linux TCP_RR round trips/s"},
			{"linux", "rr_p50_us", "Linux TCP_RR p50 us"},
			{"linux", "rr_p99_us", "Linux TCP_RR p99 us"},
		}...)
	}
	for _, p := range []struct{ key, name string }{{"ping_idle", "idle"}, {"ping_idle_irq", "idle, irqs"}, {"ping_flood", "under tx flood"}} {
		for _, d := range []string{"min_us", "avg_us", "p99_us", "max_us"} {
			rows = append(rows, row{p.key, d, fmt.Sprintf("ping %s %s", p.name, strings.TrimSuffix(d, "_us")+" us")})
		}
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	header := "metric\t"
	for _, s := range systems {
		header += r.Systems[s].Label + "\t"
	}
	fmt.Fprintln(tw, header+"tinyvmm/ceiling\ttinyvmm/vhost\ttinyvmm/QEMU\tpaired /vhost\tpaired /QEMU\t")
	for _, rw := range rows {
		line := rw.title + "\t"
		for _, s := range systems {
			txt, _, _ := r.value(rw.metric, s, rw.detail)
			line += txt + "\t"
		}
		for _, o := range []System{SysCeiling, SysQEMUVhost, SysQEMU} {
			line += r.ratio(rw.metric, rw.detail, SysTinyvmm, o) + "\t"
		}
		for _, o := range []System{SysQEMUVhost, SysQEMU} {
			line += r.pairedRatio(rw.metric, rw.detail, SysTinyvmm, o) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()

	r.printPerFrame(w)
	r.printPerThread(w)

	fmt.Fprintf(w, "\nseed 000: tx pps at 64 B vs the driver's kick threshold (a notify decision every N frames)\n")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "kick\t%s\t%s\t%s\ttinyvmm/vhost\ttinyvmm/QEMU\t\n", r.Systems[SysTinyvmm].Label, r.Systems[SysQEMUVhost].Label, r.Systems[SysQEMU].Label)
	for _, e := range r.exps {
		if !strings.HasPrefix(e.Key, "kick") {
			continue
		}
		a, _, _ := r.value(e.Key, SysTinyvmm, "")
		v, _, _ := r.value(e.Key, SysQEMUVhost, "")
		b, _, _ := r.value(e.Key, SysQEMU, "")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", strings.TrimPrefix(e.Key, "kick"), a, v, b,
			r.ratio(e.Key, "", SysTinyvmm, SysQEMUVhost), r.ratio(e.Key, "", SysTinyvmm, SysQEMU))
	}
	tw.Flush()

	if len(r.variants()) > 0 {
		fmt.Fprintf(w, "\ntinyvmm variants (interleaved with the runs above): value, exits/frame, kicks/frame\n")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "variant\ttx64 pps\trx64 pps\tping idle avg us\tping flood avg us\ttx64 exits/f\ttx64 kicks/f\trx64 exits/f\t")
		for _, v := range append([]string{""}, r.variants()...) {
			key := func(m string) string {
				if v == "" {
					return m
				}
				return m + "@" + v
			}
			name := v
			if name == "" {
				name = "default"
			}
			tx, _, _ := r.value(key("tx64"), SysTinyvmm, "")
			rx, _, _ := r.value(key("rx64"), SysTinyvmm, "")
			pi, _, _ := r.value(key("ping_idle"), SysTinyvmm, "avg_us")
			pf, _, _ := r.value(key("ping_flood"), SysTinyvmm, "avg_us")
			exits := func(c *Cell) *float64 { return c.ExitsPerFrame }
			kicks := func(c *Cell) *float64 { return c.KicksPerFrame }
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, tx, rx, pi, pf,
				r.perFrame(key("tx64"), SysTinyvmm, exits), r.perFrame(key("tx64"), SysTinyvmm, kicks), r.perFrame(key("rx64"), SysTinyvmm, exits))
		}
		tw.Flush()
	}
	if len(r.variants()) > 0 {
		r.printVariantsVsVhost(w)
	}
	if r.hasPrefix("poll") {
		fmt.Fprintf(w, "\ntx poll sweep: tinyvmm tx pps at 64 B vs --poll-us (0: off), with its exits and kicks per frame\n")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "poll-us	tx pps	exits/frame	kicks/frame	")
		for _, e := range r.exps {
			if !strings.HasPrefix(e.Key, "poll") {
				continue
			}
			pps, _, _ := r.value(e.Key, SysTinyvmm, "")
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", strings.TrimPrefix(e.Key, "poll"), pps,
				r.perFrame(e.Key, SysTinyvmm, func(c *Cell) *float64 { return c.ExitsPerFrame }),
				r.perFrame(e.Key, SysTinyvmm, func(c *Cell) *float64 { return c.KicksPerFrame }))
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nseed 002: ping under the guest's tx flood vs tinyvmm --tx-weight-pkts\n")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "weight\tmin us\tavg us\tp99 us\tmax us\ttx pps\tlost\t")
	for _, e := range r.exps {
		if !strings.HasPrefix(e.Key, "weight") {
			continue
		}
		line := strings.TrimPrefix(e.Title, "tx weight ") + "\t"
		for _, d := range []string{"min_us", "avg_us", "p99_us", "max_us", "tx_pps", "lost"} {
			txt, _, _ := r.value(e.Key, SysTinyvmm, d)
			line += txt + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, s := range []System{SysTinyvmm, SysCeiling, SysQEMUVhost, SysQEMU} {
		if skip := r.Systems[s].Skip; skip != "" {
			fmt.Fprintf(w, "\n%s: %s", r.Systems[s].Label, skip)
		}
	}
	fmt.Fprintln(w)
	r.printFailures(w)
}

// printPerFrame prints exits, kicks and interrupts per frame of the VMMs'
// throughput cells: the counts that decide the cost on any KVM.
func (r *Report) printPerFrame(w io.Writer) {
	fmt.Fprintf(w, "\nper frame, medians (KVM's counters of the VM between the guest's ready and result lines;\n"+
		"kicks: the guest's notify writes; irqs: interrupts KVM injected; host us: the VMM's CPU outside the guest,\n"+
		"vhost-net's worker included; columns: tinyvmm, QEMU+vhost, QEMU)\n")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\texits t\tv\tq\tkicks t\tv\tq\tirqs t\tv\tq\thost us t\tv\tq\t")
	keys := []string{"tx64", "tx1400", "rx64", "rx64irq", "rx64pg"}
	for _, e := range r.exps {
		if strings.HasPrefix(e.Key, "kick") {
			keys = append(keys, e.Key)
		}
	}
	type perFrameRow struct {
		name, metric string
		gets         []func(*Cell) *float64
	}
	var rows []perFrameRow
	for _, k := range keys {
		rows = append(rows, perFrameRow{k, k, []func(*Cell) *float64{
			func(c *Cell) *float64 { return c.ExitsPerFrame },
			func(c *Cell) *float64 { return c.KicksPerFrame },
			func(c *Cell) *float64 { return c.IRQsPerFrame },
			func(c *Cell) *float64 { return c.HostCPUPerFrame },
		}})
	}
	if r.hasPrefix("linux") {
		// The Linux guest's measurements keep theirs in the details.
		for _, m := range lxMeasures {
			var gets []func(*Cell) *float64
			for _, k := range []string{"exits_per_frame", "kicks_per_frame", "irqs_per_frame", "host_cpu_us_per_frame"} {
				gets = append(gets, func(c *Cell) *float64 { return c.detailPtr(m + "_" + k) })
			}
			rows = append(rows, perFrameRow{"linux " + m, "linux", gets})
		}
	}
	for _, rw := range rows {
		line := rw.name + "\t"
		for _, get := range rw.gets {
			for _, s := range []System{SysTinyvmm, SysQEMUVhost, SysQEMU} {
				line += r.perFrame(rw.metric, s, get) + "\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// perThreadKeys are the per-thread details (addCPUPerFrame), each
// followed by ":THREAD", and their columns.
var perThreadKeys = []struct{ key, col, format string }{
	{"host_cpu_us_per_frame", "host us", "%.1f"},
	{"runq_wait_us_per_frame", "wait us", "%.1f"},
	{"wakeups_per_frame", "wakeups", "%.3f"},
	{"preemptions_per_frame", "preempts", "%.3f"},
}

// printPerThread prints, per cell and VMM, where the host CPU per frame
// goes: each thread's (by name: vcpu0, net-tap0, vhost, ...) host CPU and
// run-queue wait in us, wakeups and preemptions, per frame, medians over
// the runs, the busiest thread first. The Linux cells have a row group
// per measurement.
func (r *Report) printPerThread(w io.Writer) {
	type group struct {
		name   string
		c      *Cell
		prefix string // of the details: "" or a Linux measurement's "tcp_rx_"
	}
	var keys []string // the plan's order, else the cells' (a report read back)
	for _, e := range r.exps {
		keys = append(keys, e.Key)
	}
	for _, c := range r.Cells {
		if len(r.exps) == 0 && !slices.Contains(keys, c.Metric) {
			keys = append(keys, c.Metric)
		}
	}
	var groups []group
	for _, key := range keys {
		for _, s := range []System{SysTinyvmm, SysQEMUVhost, SysQEMU} {
			c := r.cell(key, s)
			if c == nil || c.OK == 0 {
				continue
			}
			if strings.HasPrefix(key, "linux") {
				for _, m := range lxMeasures {
					groups = append(groups, group{key + " " + m, c, m + "_"})
				}
			} else {
				groups = append(groups, group{key, c, ""})
			}
		}
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	header := "cell	system	thread	"
	for _, k := range perThreadKeys {
		header += k.col + "	"
	}
	printed := false
	for _, g := range groups {
		cpu := g.prefix + perThreadKeys[0].key + ":"
		var threads []string
		for k := range g.c.Detail {
			if name, ok := strings.CutPrefix(k, cpu); ok {
				threads = append(threads, name)
			}
		}
		slices.SortFunc(threads, func(a, b string) int {
			return cmp.Or(cmp.Compare(g.c.Detail[cpu+b], g.c.Detail[cpu+a]), strings.Compare(a, b))
		})
		for i, th := range threads {
			if !printed {
				fmt.Fprintf(w, "\nper thread, per frame, medians over the runs (host us: CPU outside the guest; wait us: runnable, not running)\n")
				fmt.Fprintln(tw, header)
				printed = true
			}
			line := "\t\t"
			if i == 0 {
				line = g.name + "\t" + string(g.c.System) + "\t"
			}
			line += th + "\t"
			for _, k := range perThreadKeys {
				if v, ok := g.c.Detail[g.prefix+k.key+":"+th]; ok {
					line += fmt.Sprintf(k.format, v) + "\t"
				} else {
					line += "-\t"
				}
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()
}

// printVariantsVsVhost prints each tinyvmm variant's interrupt, latency
// and Linux-guest cells with, in parentheses, the paired ratio to
// QEMU+vhost's same cell (the rounds ran them back to back).
func (r *Report) printVariantsVsVhost(w io.Writer) {
	fmt.Fprintf(w, "\ntinyvmm variants against QEMU+vhost: median (paired tinyvmm/vhost)\n")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	names := append([]string{""}, r.variants()...)
	header := "metric\t"
	for _, v := range names {
		if v == "" {
			v = "default"
		}
		header += v + "\t"
	}
	header += "QEMU+vhost\t"
	fmt.Fprintln(tw, header)
	rows := []row{
		{"tx64", "", "tx 64 B pps"}, {"rx64", "", "rx 64 B pps"}, {"rx64irq", "", "rx 64 B irqs pps"},
		{"ping_idle", "avg_us", "ping idle avg"}, {"ping_idle_irq", "avg_us", "ping idle irqs avg"},
		{"ping_idle_irq", "p99_us", "ping idle irqs p99"},
		{"ping_flood", "avg_us", "ping flood avg"}, {"ping_flood", "p99_us", "ping flood p99"},
	}
	if r.hasPrefix("linux") {
		for _, d := range []string{"tcp_rx_mbps", "tcp_tx_mbps", "udp_rx_pps", "udp_tx_pps", "rr_tps", "rr_p50_us", "rr_p99_us"} {
			rows = append(rows, row{"linux", d, "linux " + d})
		}
	}
	for _, rw := range rows {
		vh := r.cell(rw.metric, SysQEMUVhost)
		line := rw.title + "\t"
		for _, v := range names {
			key := rw.metric
			if v != "" {
				key += "@" + v
			}
			txt, _, ok := r.value(key, SysTinyvmm, rw.detail)
			if ok && r.Systems[SysQEMUVhost].Skip == "" {
				txt += " (" + pairedCells(r.cell(key, SysTinyvmm), vh, rw.detail) + ")"
			}
			line += txt + "\t"
		}
		txt, _, _ := r.value(rw.metric, SysQEMUVhost, rw.detail)
		fmt.Fprintln(tw, line+txt+"\t")
	}
	tw.Flush()
}

// variants are the names of the tinyvmm variants measured, in order.
func (r *Report) variants() []string {
	var names []string
	for _, e := range r.exps {
		// Of any cell: --only may keep some cells of a variant and not others.
		if _, v, ok := strings.Cut(e.Key, "@"); ok && !slices.Contains(names, v) {
			names = append(names, v)
		}
	}
	return names
}

// hasPrefix says whether an experiment's key starts with prefix.
func (r *Report) hasPrefix(prefix string) bool {
	for _, e := range r.exps {
		if strings.HasPrefix(e.Key, prefix) {
			return true
		}
	}
	return false
}

func (r *Report) perFrame(metric string, s System, get func(*Cell) *float64) string {
	if r.Systems[s].Skip != "" {
		return "skipped"
	}
	c := r.cell(metric, s)
	if c == nil || c.OK == 0 {
		return "-"
	}
	if v := get(c); v != nil {
		return fmt.Sprintf("%.3f", *v)
	}
	return "n/a"
}

func (r *Report) printFailures(w io.Writer) {
	first := true
	for _, c := range r.Cells {
		for i, s := range c.Samples {
			why := s.Err
			if why == "" && strings.Contains(s.Note, "failed") {
				why = "partly: " + s.Note
			}
			if why == "" {
				continue
			}
			if first {
				fmt.Fprintf(w, "\nfailed runs:\n")
				first = false
			}
			fmt.Fprintf(w, "  %s %s run %d: %s\n", c.Metric, c.System, i+1, truncate(why, 300))
		}
	}
}

// write saves e2e.json and the plots in dir.
func (r *Report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench e2e: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "e2e.json"), b, 0o644); err != nil {
		return fmt.Errorf("bench e2e: %w", err)
	}
	return r.plot(dir)
}
