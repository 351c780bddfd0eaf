// Package e2e is the end-to-end benchmark, `tinyvmm-lab bench e2e`: the bench
// guest under tinyvmm, the no-VM ceiling and QEMU (README.md here).
package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"tinyvmm/kvm"
)

// Options configure `tinyvmm-lab bench e2e`.
type Options struct {
	OutDir  string // JSON and plots go here
	Runs    int    // runs per cell, interleaved between systems (at least 3)
	Secs    int    // seconds per measurement
	Kicks   []int  // experiment 000: a tx notify decision every N frames
	Weights []int  // experiment 002: tinyvmm --tx-weight-pkts (0 = unlimited)
	Polls   []int  // the tx poll sweep: tinyvmm --poll-us (0 = off), tx 64 B
	// Variants are tinyvmm flag sets run beside the default, interleaved,
	// in every cell that takes tinyvmm flags (--variant NAME=FLAGS): the
	// pps, ping and Linux-guest cells, as KEY@NAME.
	Variants []Variant
	Budget   time.Duration // no new run starts after this; the rest show as not run
	ELF      string        // the bench guest
	Tinyvmm  string        // the tinyvmm binary
	QEMU     string        // qemu-system-x86_64
	// QEMUMachine is QEMU's -M (--qemu-machine).
	QEMUMachine string
	// QEMUPreload is LD_PRELOADed into QEMU (--qemu-preload): the nested
	// L1 keeps QEMU off io_uring with it.
	QEMUPreload string
	Out         io.Writer // the table
	// Pin gives each run's vCPU a CPU of its own and keeps everything else
	// off it (--pin, pin.go); it needs 2 CPUs.
	Pin bool
	// PinApart, with Pin, also gives the harness a CPU of its own, apart
	// from the VMMs' threads (--pin-apart, pin.go); it needs 3 CPUs.
	PinApart bool
	// CPUProfile, when set, gets tinyvmm's Go CPU profile of its last tx
	// run, and CPUProfile+".rx" that of its last rx run (a development
	// flag of bench e2e, --cpuprofile).
	CPUProfile string
	// Only, when not empty, keeps just the cells with these keys (--only).
	Only []string
}

// DefaultOptions are the settings of `make bench`: about 4 minutes here.
func DefaultOptions() Options {
	return Options{
		OutDir: "out/bench", Runs: 3, Secs: 2,
		Kicks:   []int{1, 2, 4, 8, 16, 32, 64},
		Weights: []int{0, 64, 128, 256, 512, 1024, 2048, 4096},
		Budget:  14 * time.Minute,
		ELF:     "out/guest/bench.elf", Tinyvmm: "bin/tinyvmm", QEMU: "qemu-system-x86_64", QEMUMachine: DefaultQEMUMachine,
		Out: os.Stdout,
	}
}

// Variant is a named set of extra tinyvmm flags (--variant NAME=FLAGS).
type Variant struct {
	Name string
	Args []string
}

// experiment is one row of the comparison: a measurement run per system.
type experiment struct {
	Key, Title, Unit string
	Systems          []System
	run              func(sys System) Sample
	// withArgs, when set, is run with extra tinyvmm flags: the cell also
	// runs as KEY@NAME, tinyvmm only, for each --variant.
	withArgs func(sys System, args []string) Sample
}

// variable is a cell that also runs as each --variant.
func variable(key, title, unit string, systems []System, run func(System, []string) Sample) experiment {
	return experiment{key, title, unit, systems, func(s System) Sample { return run(s, nil) }, run}
}

// variantCells are, for each variant, the cells of cells that take flags:
// KEY@NAME, tinyvmm only, with the variant's flags.
func variantCells(cells []experiment, variants []Variant) []experiment {
	var out []experiment
	for _, v := range variants {
		for _, e := range cells {
			if e.withArgs != nil {
				out = append(out, experiment{e.Key + "@" + v.Name, e.Title, e.Unit, []System{SysTinyvmm},
					func(s System) Sample { return e.withArgs(s, v.Args) }, nil})
			}
		}
	}
	return out
}

// systemState says whether a system runs here and how it is labelled.
type systemState struct {
	Label      string `json:"label"`
	Skip       string `json:"skip,omitempty"` // why it does not run
	Comparable bool   `json:"comparable"`     // tinyvmm/system ratios mean something
}

func detectSystems(o Options, host kvm.Host) map[System]systemState {
	st := map[System]systemState{
		SysCeiling: {Label: "ceiling (no VM)", Comparable: true},
	}
	switch {
	case !host.Usable:
		st[SysTinyvmm] = systemState{Label: "tinyvmm", Skip: "skipped: " + host.Why}
	case fileMissing(o.Tinyvmm):
		st[SysTinyvmm] = systemState{Label: "tinyvmm", Skip: "skipped: no " + o.Tinyvmm + " (run make build)"}
	default:
		st[SysTinyvmm] = systemState{Label: "tinyvmm", Comparable: true}
	}
	q := systemState{Label: "QEMU (KVM)", Comparable: true}
	switch {
	case qemuAccel(host) == "kvm":
	case !host.Usable:
		q = systemState{Label: "QEMU (TCG, not comparable)"}
	default:
		q = systemState{Label: "QEMU (TCG; PVM host, not comparable)"}
	}
	if o.QEMUPreload != "" {
		q.Label += ", LD_PRELOAD " + filepath.Base(o.QEMUPreload)
	}
	if _, err := exec.LookPath(o.QEMU); err != nil {
		q.Skip = "skipped: no " + o.QEMU + " (apt-get install qemu-system-x86)"
	}
	st[SysQEMU] = q
	v := q
	v.Label = strings.Replace(q.Label, "QEMU", "QEMU+vhost", 1)
	if v.Skip == "" && fileMissing(vhostNet) {
		v.Skip = "skipped: no " + vhostNet + " (a host kernel with CONFIG_VHOST_NET; modprobe vhost_net)"
	}
	st[SysQEMUVhost] = v
	return st
}

// qemuAccel is QEMU's -accel: kvm wherever /dev/kvm is hardware
// virtualization, including the nested L1 of test/nested (real nested SVM).
// On PVM QEMU's guest would run at CPL0 in PVM's instruction emulator,
// slower than TCG.
func qemuAccel(host kvm.Host) string {
	if host.Usable && !host.PVM {
		return "kvm"
	}
	return "tcg"
}

func fileMissing(p string) bool {
	_, err := os.Stat(p)
	return err != nil
}

func (o Options) experiments(r *runner) []experiment {
	vms := []System{SysTinyvmm, SysQEMUVhost, SysQEMU}
	all := []System{SysTinyvmm, SysCeiling, SysQEMUVhost, SysQEMU}
	exps := []experiment{
		variable("tx64", "guest->host pps, 64 B", "pps", all, func(s System, a []string) Sample { return r.tx(s, 64, 1, a) }),
		variable("tx1400", "guest->host pps, 1400 B", "pps", all, func(s System, a []string) Sample { return r.tx(s, 1400, 1, a) }),
		variable("rx64", "host->guest pps, 64 B", "pps", all, func(s System, a []string) Sample { return r.rx(s, false, SendFlood, a) }),
		variable("rx64irq", "host->guest pps, 64 B, guest halts between interrupts", "pps", vms, func(s System, a []string) Sample { return r.rx(s, true, SendFlood, a) }),
	}
	// pktgen's cell where the kernel has pktgen (bench/nested.sh's L1), or
	// where it is asked for.
	if pktgenHere() || slices.Contains(o.Only, "rx64pg") {
		exps = append(exps, variable("rx64pg", "host->guest pps, 64 B, pktgen sender", "pps", vms, func(s System, a []string) Sample { return r.rx(s, false, PktgenFlood, a) }))
	}
	// The Linux guest's cells where the host side has iperf3, or where
	// they are asked for.
	if lxHere() == "" || slices.Contains(o.Only, "linux") {
		exps = append(exps, variable("linux", lxTitle, "Mbit/s", vms, r.linux))
	}
	exps = append(exps,
		variable("ping_idle", "ping, guest idle", "us", all, func(s System, a []string) Sample { return r.ping(s, pingIdle, a) }),
		variable("ping_idle_irq", "ping, guest halted between interrupts", "us", vms, func(s System, a []string) Sample { return r.ping(s, pingIdleIRQ, a) }),
		variable("ping_flood", "ping, guest flooding tx", "us", all, func(s System, a []string) Sample { return r.ping(s, pingFlood, a) }),
	)
	base := len(exps)
	for _, k := range o.Kicks {
		exps = append(exps, experiment{fmt.Sprintf("kick%d", k), fmt.Sprintf("tx 64 B, kick=%d", k), "pps", vms,
			func(s System) Sample { return r.tx(s, 64, k, nil) }, nil})
	}
	for _, w := range o.Weights {
		args := []string{"--tx-weight-pkts", strconv.Itoa(w)}
		exps = append(exps, experiment{fmt.Sprintf("weight%d", w), "tx weight " + weightName(w), "us", []System{SysTinyvmm},
			func(s System) Sample { return r.ping(s, pingFlood, args) }, nil})
	}
	exps = append(exps, variantCells(exps[:base], o.Variants)...)
	for _, p := range o.Polls {
		args := []string{"--poll-us", strconv.Itoa(p)}
		exps = append(exps, experiment{fmt.Sprintf("poll%d", p), fmt.Sprintf("tx 64 B, poll-us=%d", p), "pps", []System{SysTinyvmm},
			func(s System) Sample { return r.tx(s, 64, 1, args) }, nil})
	}
	return exps
}

// cells are the experiments to run: all of them, or those Only names.
func (o Options) cells(r *runner) ([]experiment, error) {
	exps := o.experiments(r)
	if len(o.Only) == 0 {
		return exps, nil
	}
	var keys []string
	for _, e := range exps {
		keys = append(keys, e.Key)
	}
	for _, k := range o.Only {
		if !slices.Contains(keys, k) {
			return nil, fmt.Errorf("bench e2e: --only: no cell %q (cells with these flags: %s)", k, strings.Join(keys, ","))
		}
	}
	return slices.DeleteFunc(exps, func(e experiment) bool { return !slices.Contains(o.Only, e.Key) }), nil
}

func weightName(w int) string {
	if w == 0 {
		return "unlimited"
	}
	return strconv.Itoa(w)
}

// RunE2E runs every experiment on every system that can run here, Runs
// times, interleaved, then prints the table and writes JSON and plots.
func RunE2E(o Options) (*Report, error) {
	if o.Runs < 1 || o.Secs < 1 {
		return nil, errors.New("bench e2e: --runs and --secs must be at least 1")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("bench e2e: needs root for network namespaces and taps (run with sudo)")
	}
	if o.QEMUPreload != "" && fileMissing(o.QEMUPreload) {
		return nil, fmt.Errorf("bench e2e: --qemu-preload %s: no such file", o.QEMUPreload)
	}
	if fileMissing(o.ELF) {
		return nil, fmt.Errorf("bench e2e: no bench guest at %s (run guest/bench/build.sh)", o.ELF)
	}
	host := kvm.Detect()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil && !fileMissing(a) {
			return a
		}
		return p
	}
	cfg := GuestConfig{ELF: abs(o.ELF), Tinyvmm: abs(o.Tinyvmm), QEMU: o.QEMU, QEMUAccel: qemuAccel(host),
		QEMUMachine: o.QEMUMachine, QEMUPreload: o.QEMUPreload}
	bootMax := 60 * time.Second
	r := &runner{cfg: cfg, secs: o.Secs, tscKHz: HostTSCkHz(), bootMax: bootMax, cpuprofile: o.CPUProfile}
	defer r.cleanup()
	if self, err := os.Executable(); err == nil {
		r.lxHelper = self // the guest's side of the linux cells: bench e2e lxguest
	}
	if o.Pin {
		p, err := newPinning(o.PinApart)
		if err == nil {
			err = p.pinSelf()
		}
		if err != nil {
			return nil, fmt.Errorf("bench e2e: --pin: %w", err)
		}
		r.pin = p
	}
	rep := newReport(o, host, detectSystems(o, host))
	if r.pin != nil {
		rep.Machine.Pinning = r.pin.String()
	}
	exps, err := o.cells(r)
	if err != nil {
		return nil, err
	}
	rep.plan(exps)
	if sc, err := MeasureSwitchCost(r.lxHelper); err != nil {
		fmt.Fprintf(o.Out, "bench e2e: the switch cost not measured: %v\n", err)
	} else {
		rep.Machine.Switch = &sc
	}
	// Ctrl-C or SIGTERM: no new run starts; the current one ends within
	// its bounds and cleans up its namespace, and the table shows what ran.
	var interrupted atomic.Bool
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			interrupted.Store(true)
			fmt.Fprintln(o.Out, "bench e2e: interrupted; finishing the current run")
		}
	}()
	start := time.Now()
	fmt.Fprintf(o.Out, "bench e2e: %d experiments x %d runs, %d s each; %s\n", len(exps), o.Runs, o.Secs, host)
	for round := 0; round < o.Runs; round++ {
		for _, e := range exps {
			systems := slices.Clone(e.Systems)
			rotate(systems, round) // no system always goes first
			for _, s := range systems {
				if rep.Systems[s].Skip != "" {
					continue
				}
				var smp Sample
				switch {
				case interrupted.Load():
					smp = Sample{Err: "not run: interrupted"}
				case time.Since(start) > o.Budget:
					smp = Sample{Err: fmt.Sprintf("not run: over the %v budget", o.Budget)}
				default:
					smp = e.run(s)
				}
				rep.add(e, s, smp)
				status := "ok"
				if smp.Err != "" {
					status = "FAILED: " + smp.Err
				}
				fmt.Fprintf(o.Out, "  [%3ds] run %d %-12s %-8s %10.0f %s  %s\n", int(time.Since(start).Seconds()),
					round+1, e.Key, s, smp.Value, e.Unit, truncate(status, 160))
			}
		}
	}
	rep.finish(time.Since(start))
	rep.printTable(o.Out)
	if err := rep.write(o.OutDir); err != nil {
		return rep, err
	}
	if interrupted.Load() {
		return rep, errors.New("bench e2e: interrupted; the table shows the runs that finished")
	}
	fmt.Fprintf(o.Out, "\nwrote %s and %s\n", filepath.Join(o.OutDir, "e2e.json"), filepath.Join(o.OutDir, "e2e-*.png"))
	return rep, nil
}

func rotate(s []System, n int) {
	if len(s) == 0 {
		return
	}
	n %= len(s)
	r := append(slices.Clone(s[n:]), s[:n]...)
	copy(s, r)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
