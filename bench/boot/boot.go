// Package bootbench is `tinyvmm-lab bench boot`: how long a VM takes from the
// VMM's spawn to the guest's /init and to its exit, for tinyvmm, QEMU's
// microvm machine and QEMU's q35 with the PVH entry, with the same kernel,
// initramfs and command line, interleaved, with medians of every milestone,
// KVM's exit counters at /init and the VMM's own memory.
package bootbench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"tinyvmm/bench/tinyvmmbin"
	"tinyvmm/internal/cliflag"
	"tinyvmm/kvm"
	"tinyvmm/vmm"
)

// Options are bench boot's flags.
type Options struct {
	Runs    int
	Warmup  int
	Kernel  string
	Initrd  string
	MemMiB  int
	Append  string
	Tinyvmm string
	QEMU    string
	Systems string
	// Floor is kvmprobe's path: when set, the systems include SysFloor.
	Floor   string
	Out     string
	Timeout time.Duration
	// Report, when set, reads that boot.json and only prints and plots it.
	Report string
}

// DefaultOptions are the defaults, relative to the repository.
func DefaultOptions() Options {
	return Options{Runs: 9, Warmup: 1, Kernel: "out/guest/vmlinux", Initrd: "out/guest/initramfs.cpio", MemMiB: 256,
		QEMU: "qemu-system-x86_64", Systems: "tinyvmm,qemu-microvm,qemu-q35", Out: "out/bench", Timeout: 2 * time.Minute}
}

// MainBoot is `tinyvmm-lab bench boot [flags]`.
func MainBoot(args []string, stdout, stderr io.Writer) error {
	o := DefaultOptions()
	fs := flag.NewFlagSet("bench boot", flag.ContinueOnError)
	fs.IntVar(&o.Runs, "runs", o.Runs, "timed boots per system, interleaved")
	fs.IntVar(&o.Warmup, "warmup", o.Warmup, "untimed boots per system first")
	fs.StringVar(&o.Kernel, "kernel", o.Kernel, "guest kernel: an uncompressed vmlinux with a PVH note (QEMU boots it through PVH)")
	fs.StringVar(&o.Initrd, "initrd", o.Initrd, "initramfs whose /init writes the boot timer port and runs the command")
	fs.IntVar(&o.MemMiB, "mem", o.MemMiB, "guest memory in MiB")
	fs.StringVar(&o.Append, "append", "", "extra kernel arguments for every system")
	fs.StringVar(&o.Tinyvmm, "tinyvmm", "", "the tinyvmm binary (default: the one beside this command)")
	fs.StringVar(&o.QEMU, "qemu", o.QEMU, "the QEMU binary")
	fs.StringVar(&o.Systems, "systems", o.Systems, "comma-separated systems to boot")
	fs.StringVar(&o.Floor, "floor", "", "also time kvmprobe `PATH` (test/nested/kvmprobe) from its spawn to its first KVM_RUN: the least a Go VMM spends there (bench/boot.sh passes L1's)")
	fs.StringVar(&o.Out, "out", o.Out, "directory for boot.json and boot.png")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "longest one boot may take")
	fs.StringVar(&o.Report, "report", "", "print and plot an existing boot.json `FILE` (no boots)")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench boot", "Usage: tinyvmm-lab bench boot [flags]\n(where /dev/kvm is missing or PVM: bench/boot.sh)", args, stdout); help || err != nil {
		return err
	}
	if o.Runs < 1 || o.MemMiB < 16 {
		return cliflag.Usagef("bench boot: --runs %d --mem %d: want at least 1 run and 16 MiB", o.Runs, o.MemMiB)
	}
	if o.Report != "" {
		r, err := ReadReport(o.Report)
		if err != nil {
			return err
		}
		r.Table(stdout)
		return r.Plot(filepath.Join(filepath.Dir(o.Report), "boot.png"))
	}
	if why := unfit(kvm.Detect()); why != "" {
		return fmt.Errorf("bench boot needs a KVM that runs Linux user space (%s); bench/boot.sh runs it in the nested L1", why)
	}
	r, err := Bench(o, stderr)
	if err != nil {
		return err
	}
	r.Table(stdout)
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	file := filepath.Join(o.Out, "boot.json")
	if err := r.WriteJSON(file); err != nil {
		return err
	}
	if err := r.Plot(filepath.Join(o.Out, "boot.png")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and boot.png\n", file)
	return nil
}

// Bench boots every system Runs times, interleaved (each round starts with
// the next system, so none always goes first), after Warmup untimed rounds.
func Bench(o Options, progress io.Writer) (*Report, error) {
	if o.Runs < 1 || o.MemMiB < 16 {
		return nil, fmt.Errorf("bench boot: --runs must be at least 1 and --mem at least 16")
	}
	b, err := newBencher(o)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.tmp)
	start := time.Now()
	r := &Report{Date: start.UTC(), Machine: describeMachine(), Runs: o.Runs, Kernel: b.kernel, Initrd: b.initrd,
		MemMiB: o.MemMiB, Cmdline: b.cmdline}
	for _, s := range b.systems {
		r.Systems = append(r.Systems, &Result{System: s, Command: b.command(s, "DIR")})
	}
	for round := -o.Warmup; round < o.Runs; round++ {
		for i := range r.Systems {
			res := r.Systems[(i+round+o.Warmup)%len(r.Systems)]
			run := b.boot(res.System)
			run.Index = round
			if round < 0 {
				if run.Err != "" {
					fmt.Fprintf(progress, "bench boot: %s warm-up failed: %s\n", res.System, run.Err)
				}
				continue
			}
			fmt.Fprintf(progress, "bench boot: run %d %-13s %s\n", round, res.System, run.brief())
			res.Runs = append(res.Runs, run)
		}
	}
	r.Took = time.Since(start).Round(time.Second).String()
	r.summarize()
	return r, nil
}

// brief is one progress line's worth of a run.
func (r Run) brief() string {
	if r.Err != "" {
		return "failed: " + r.Err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "total %.0f ms", r.TotalS*1000)
	for _, m := range []string{"first_kvm_run", "kernel_entry", "init"} {
		if v, ok := r.milestone(m); ok {
			fmt.Fprintf(&b, ", %s %.0f ms", m, v*1000)
		}
	}
	if n, ok := r.ExitsAtInit["exits"]; ok {
		fmt.Fprintf(&b, ", %d exits", n)
	}
	return b.String()
}

// bencher holds what every boot shares.
type bencher struct {
	o              Options
	kernel, initrd string
	tinyvmm, qemu  string
	floor          string
	cmdline        string
	systems        []System
	tmp            string
}

func newBencher(o Options) (*bencher, error) {
	b := &bencher{o: o, cmdline: vmm.GuestCmdline(o.Append, []string{"true"})}
	var err error
	for _, p := range []*string{&o.Kernel, &o.Initrd} {
		if _, err := os.Stat(*p); err != nil {
			return nil, fmt.Errorf("bench boot: %v (make guest builds the default guest)", err)
		}
	}
	if b.kernel, err = filepath.Abs(o.Kernel); err != nil {
		return nil, err
	}
	if b.initrd, err = filepath.Abs(o.Initrd); err != nil {
		return nil, err
	}
	b.tinyvmm = o.Tinyvmm
	if b.tinyvmm == "" {
		if b.tinyvmm, err = tinyvmmbin.Path(); err != nil {
			return nil, fmt.Errorf("bench boot: %v", err)
		}
	}
	b.qemu = o.QEMU
	systems := o.Systems
	if o.Floor != "" {
		if b.floor, err = filepath.Abs(o.Floor); err != nil {
			return nil, err
		}
		if _, err := os.Stat(b.floor); err != nil {
			return nil, fmt.Errorf("bench boot: --floor: %v", err)
		}
		if !strings.Contains(","+systems+",", ","+string(SysFloor)+",") {
			systems += "," + string(SysFloor)
		}
	}
	for _, name := range strings.Split(systems, ",") {
		s := System(strings.TrimSpace(name))
		known := false
		for _, k := range AllSystems {
			known = known || s == k
		}
		if !known {
			return nil, fmt.Errorf("bench boot: unknown system %q; use %v", s, AllSystems)
		}
		if s == SysFloor && b.floor == "" {
			return nil, fmt.Errorf("bench boot: system %s needs --floor PATH (kvmprobe: go build ./test/nested/kvmprobe)", s)
		}
		b.systems = append(b.systems, s)
	}
	if b.tmp, err = os.MkdirTemp("", "bench-boot-"); err != nil {
		return nil, err
	}
	return b, nil
}

// boot runs one boot of s in a fresh directory.
func (b *bencher) boot(s System) Run {
	dir, err := os.MkdirTemp(b.tmp, string(s)+"-")
	if err != nil {
		return Run{Err: err.Error()}
	}
	defer os.RemoveAll(dir)
	switch s {
	case SysTinyvmm, SysTinyvmmUser:
		return b.bootTinyvmm(s, dir)
	case SysFloor:
		return b.runFloor()
	}
	return b.bootQEMU(s, dir)
}

// command is the command line of s, with its files in dir.
func (b *bencher) command(s System, dir string) []string {
	mem := fmt.Sprint(b.o.MemMiB)
	if s == SysFloor {
		return []string{b.floor, "-exits", "1", "-stamp"}
	}
	if s == SysTinyvmm || s == SysTinyvmmUser {
		args := []string{b.tinyvmm, "run", "--kernel", b.kernel, "--initrd", b.initrd, "--mem", mem + "M",
			"--stats=" + filepath.Join(dir, "stats.json")}
		if s == SysTinyvmmUser {
			args = append(args, "--net", "user")
		}
		if b.o.Append != "" {
			args = append(args, "--append", b.o.Append)
		}
		return append(args, "--", "true")
	}
	args := []string{b.qemu}
	switch s {
	case SysMicrovm:
		args = append(args, "-M", "microvm", "-bios", "bios-microvm.bin")
	case SysQ35:
		args = append(args, "-M", "q35")
	}
	return append(args, "-accel", "kvm", "-cpu", "host", "-m", mem, "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none", "-no-reboot",
		"-serial", "stdio",
		"-kernel", b.kernel, "-initrd", b.initrd, "-append", b.cmdline,
		"-device", "isa-debug-exit,iobase=0x501,iosize=1",
		"-chardev", "socket,id=boottimer,path="+filepath.Join(dir, "boottimer.sock"),
		"-device", fmt.Sprintf("isa-debugcon,iobase=%#x,chardev=boottimer", vmm.BootTimerPort),
		"-chardev", "socket,id=qmp,path="+filepath.Join(dir, "qmp.sock"),
		"-mon", "chardev=qmp,mode=control",
		"-msg", "timestamp=on", "-trace", "fw_cfg_select", "-D", filepath.Join(dir, "trace.log"))
}

// seconds is t as seconds after start, as a pointer for Run's fields.
func seconds(t, start time.Time) *float64 {
	v := t.Sub(start).Seconds()
	return &v
}

func unixNs(ns int64) time.Time { return time.Unix(0, ns) }

// unfit says why host cannot run the benchmark's guests, or "" when it
// can. A /dev/kvm that cannot be opened comes first: the kvm_pvm module
// may be loaded on a machine with no /dev/kvm at all.
func unfit(host kvm.Host) string {
	switch {
	case !host.Usable:
		return host.Why
	case host.PVM:
		return "this /dev/kvm is PVM, where the guest's user space cannot run"
	}
	return ""
}
