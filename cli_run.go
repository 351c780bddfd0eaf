package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"tinyvmm/internal/cliflag"
	"tinyvmm/kvm"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtionet"
	"tinyvmm/vmm"
)

const runUsage = `Usage: tinyvmm run [flags] [-- CMD ARGS...]

Boots a Linux guest. With -- CMD, the guest's init runs CMD and tinyvmm
exits with its status; without it, the console is an interactive shell
(press Ctrl-A x to quit). The guest's console goes to stdout.

Without --kernel/--initrd, the default guest from 'make guest' is used
(out/guest next to the binary, or $TINYVMM_GUEST_DIR).
`

// runFlags is everything `tinyvmm run` accepts.
type runFlags struct {
	cfg    vmm.Config
	tuning virtionet.Tuning
	trace  bool
	notify string // --notify, parsed by check
	// timeout stops a guest still running after it (status 124).
	timeout time.Duration
	// cpuprofile is a development flag, hidden from --help: tinyvmm's own
	// Go CPU profile while the guest runs (go tool pprof -top FILE).
	cpuprofile string
}

func newRunFlagSet(f *runFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.cfg.MemBytes = 256 << 20
	f.tuning = virtionet.DefaultTuning()
	fs.StringVar(&f.cfg.Kernel, "kernel", "", "guest kernel: a bzImage or an uncompressed vmlinux `PATH` (default: out/guest/vmlinux)")
	fs.StringVar(&f.cfg.Initrd, "initrd", "", "initramfs `PATH` (default: out/guest/initramfs.cpio)")
	fs.StringVar(&f.cfg.Cmdline, "append", "", "extra kernel command-line `ARGS`")
	fs.Var(sizeValue{&f.cfg.MemBytes}, "mem", "guest memory `SIZE`, like 256M or 1G (a plain number is MiB)")
	fs.IntVar(&f.cfg.CPUs, "cpus", 1, "run `N` vCPUs")
	fs.BoolVar(&f.cfg.UserStart, "bench-guest", false, "start --kernel as a freestanding user-mode ELF (the bench guest, default out/guest/bench.elf); --append is its argument string")
	fs.Var(netsValue{&f.cfg.Nets}, "net", "add a NIC (repeatable); `SPEC` is one of:\n"+
		"  tap=NAME[,OPTS]          a tap device (needs root or CAP_NET_ADMIN)\n"+
		"  af_packet=IFNAME[,OPTS]  a host interface, through a packet socket\n"+
		"  user[,hostfwd=tcp:127.0.0.1:HPORT-:GPORT]...\n"+
		"                           a rootless user-mode network: the guest gets\n"+
		"                           10.0.2.15 by DHCP; 10.0.2.2 is its gateway,\n"+
		"                           DNS server and the host's 127.0.0.1\n"+
		"OPTS, comma-separated: mac=MAC; mtu=N; io=uring (batches of frames per io_uring_enter, the default) or io=writev (a system call per frame); queues=N queue pairs, each with its own worker (default: one per vCPU, up to 8); pcap=FILE captures every frame; rx-rate=/tx-rate=BYTES/s[:BURST] and rx-pps=/tx-pps=N[:BURST] are token-bucket limits (K, M, G: powers of 1000)")
	fs.Var(sharesValue{&f.cfg.Shares}, "share", "share a host directory read-write over virtio-fs: `HOSTDIR[:GUESTPATH]` (repeatable; the default guest mounts it at GUESTPATH, by default the same path, and runs -- CMD there when the working directory is inside it)")
	fs.Var(rootValue{&f.cfg.Root}, "root", "boot the default guest on `DIR` as its root: --root / runs the host's own system and toolchain, read-only over virtio-fs, writes going to a tmpfs overlay, with fresh /proc, /sys, /dev, /run and /tmp; the command runs in the current directory, and --rwdir or --share make directories writable through to the host")
	fs.Var(sharesValue{&f.cfg.Shares}, "rwdir", "with --root: let the guest write to host directory `DIR` itself, at the same path (repeatable; the same as --share DIR)")
	fs.Var(shareCacheValue{&f.cfg.ShareCache}, "share-cache", "what the guest keeps of the --share and --rwdir directories: `auto` (names and attributes for 1 s, file pages while a file is open: a change on the host shows at the next open) or always (names, attributes, pages and listings kept up to 60 s: for a tree the host leaves alone while the guest runs); --root's tree is always cached the second way")
	fs.StringVar(&f.notify, "notify", pci.NotifyIoeventfd.String(), "how guest kicks reach the net device: `ioeventfd` (in KVM) or exit (a vCPU exit handled in Go)")
	fs.Var(statsValue{&f.cfg.Stats}, "stats", "print boot timings and device counters at exit; --stats=`FILE` writes them as JSON")
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the guest if it still runs after `DURATION` (like 90s or 10m) and exit with status 124 (0: no limit)")
	fs.BoolVar(&f.trace, "trace", false, "print one compact line per datapath event on stderr")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "(hidden) write tinyvmm's Go CPU profile to `FILE` (development)")
	fs.IntVar(&f.tuning.TxWeightPkts, "tx-weight-pkts", f.tuning.TxWeightPkts, "tx packets per worker run before requeueing (0: unlimited)")
	fs.IntVar(&f.tuning.TxYieldPkts, "tx-yield-pkts", f.tuning.TxYieldPkts, "a tx run sends up to N packets per system call (at most 64) and looks after each group for frames waiting for the guest, letting rx go first if some do, before its weights are used up (0: never looks, as vhost-net; groups of 64)")
	fs.IntVar(&f.tuning.TxWeightBytes, "tx-weight-bytes", f.tuning.TxWeightBytes, "tx bytes per worker run before requeueing (0: unlimited)")
	fs.IntVar(&f.tuning.RxWeightPkts, "rx-weight-pkts", f.tuning.RxWeightPkts, "rx packets per worker run before requeueing (0: unlimited)")
	fs.IntVar(&f.tuning.RxWeightBytes, "rx-weight-bytes", f.tuning.RxWeightBytes, "rx bytes per worker run before requeueing (0: unlimited)")
	fs.IntVar(&f.tuning.RxBatch, "rx-batch", f.tuning.RxBatch, "rx frames per batch (one used-index publish and one interrupt per batch)")
	fs.IntVar(&f.tuning.NotifyThreshold, "notify-threshold", f.tuning.NotifyThreshold, "during a tx burst the guest kicks once per N chains; used entries are published after each send group, or every N chains where the groups are smaller")
	fs.IntVar(&f.tuning.RxIrqGapUs, "rx-irq-us", f.tuning.RxIrqGapUs, "rx interrupt moderation: at least N us between two rx interrupts; one due sooner waits and covers what arrives meanwhile (0: off)")
	fs.BoolVar(&f.tuning.PollLone, "poll-lone", f.tuning.PollLone, "busy poll (--poll-us) after frames that come alone too, such as a ping and its reply, when the device's worker can run on a CPU that no vCPU thread may use: the reply then needs no kick and no wakeup; it costs up to --poll-us of CPU per lone frame, so it stops while replies come later than that (off by default: with a guest that halts between interrupts it costs the CPU the host's side needs)")
	fs.BoolVar(&f.tuning.WorkerBatch, "worker-batch", f.tuning.WorkerBatch, "run the device worker under SCHED_BATCH during tx bursts (a kick on a busy CPU does not preempt the vCPU that is adding frames), and during rx bursts where the worker and the vCPU threads are pinned to different CPUs (a frame from the tap does not preempt its sender) (on by default; --worker-batch=false: off)")
	fs.IntVar(&f.tuning.WorkerBatchBytes, "worker-batch-bytes", f.tuning.WorkerBatchBytes, "with --worker-batch, a tx run that moved N bytes or more counts as a burst however few its frames, so a bulk sender's lone frames do not preempt its vCPU (0: the network's default, 1024 on --net user, off on a tap; -1: off)")
	fs.IntVar(&f.tuning.PollUs, "poll-us", f.tuning.PollUs, "busy poll after a burst: for N us after the last frame keep the guest's tx kicks (and rx kicks, when rx buffers run out) off and look at the rings and the tap again after each sched_yield instead of sleeping (0: off)")
	return fs
}

// splitCommand separates tinyvmm's flags from the guest command after --.
func splitCommand(args []string) (flags, cmd []string, hasCmd bool) {
	if i := slices.Index(args, "--"); i >= 0 {
		return args[:i], args[i+1:], true
	}
	return args, nil, false
}

func runMain(args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := newRunFlagSet(&f)
	flagArgs, command, hasCmd := splitCommand(args)
	if err := cliflag.Parse(fs, "run", flagArgs); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, runUsage)
			cliflag.PrintFlags(stdout, fs, runFlagGroups)
			return 0
		}
		return fail(stderr, exitUsage, err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, fmt.Errorf("unexpected argument %q; put the guest command after --", fs.Arg(0)))
	}
	if f.timeout < 0 {
		return fail(stderr, exitUsage, fmt.Errorf("--timeout %v is negative", f.timeout))
	}
	if hasCmd && len(command) == 0 {
		return fail(stderr, exitUsage, fmt.Errorf("nothing after --; give the command for the guest to run"))
	}
	if err := f.check(); err != nil {
		return fail(stderr, exitUsage, err)
	}
	cfg := f.cfg
	cfg.Command = command
	cfg.WorkDir = hostWorkDir()
	if cfg.Root != "" {
		cfg.Env = hostEnv()
		cfg.Shares = withWorkDir(cfg.Shares, cfg.Root, cfg.WorkDir)
	}
	for i := range cfg.Nets {
		cfg.Nets[i].Tuning = f.tuning
	}
	if f.trace {
		cfg.Trace = stderr
		for i := range cfg.Nets {
			cfg.Nets[i].Trace = stderr
		}
	}
	kernelGiven := cfg.Kernel != ""
	// Flag values that need no file come first, so usage errors are 2.
	check := cfg
	if check.Kernel == "" {
		check.Kernel = "(default)"
	}
	if err := check.Validate(); err != nil {
		return fail(stderr, exitUsage, err)
	}
	if err := resolveDefaults(&cfg, kernelGiven, stderr); err != nil {
		return fail(stderr, exitRuntime, err)
	}
	if f.cpuprofile != "" {
		prof, err := os.Create(f.cpuprofile)
		if err != nil {
			return fail(stderr, exitRuntime, err)
		}
		defer prof.Close()
		if err := pprof.StartCPUProfile(prof); err != nil {
			return fail(stderr, exitRuntime, err)
		}
		defer pprof.StopCPUProfile()
	}
	return boot(cfg, hasCmd, f.timeout, stdout, stderr)
}

// resolveDefaults fills in the default guest. On PVM the default initrd
// is the kernel-only one, and tinyvmm says why in one line.
func resolveDefaults(cfg *vmm.Config, kernelGiven bool, stderr io.Writer) error {
	dirs := guestDirs()
	if !kernelGiven {
		name := defaultKernel
		if cfg.UserStart {
			name = defaultBenchGuest
		}
		cfg.Kernel = findGuestFile(dirs, name)
		if cfg.Kernel == "" {
			return fmt.Errorf("no default kernel (out/guest/%s); build the default guest with 'make guest', or pass --kernel PATH", name)
		}
	}
	if cfg.Initrd != "" || cfg.UserStart {
		return nil
	}
	name := defaultInitrd
	if kvm.Detect().PVM {
		name = defaultPVMInitrd
	}
	cfg.Initrd = findGuestFile(dirs, name)
	if cfg.Initrd == "" && !kernelGiven {
		return fmt.Errorf("no default initrd (out/guest/%s); build the default guest with 'make guest', or pass --initrd PATH", name)
	}
	if cfg.Initrd != "" && name == defaultPVMInitrd {
		cfg.Notices = append(cfg.Notices, "guest user space cannot make system calls under PVM, so the default guest here is kernel-only (no shell, no command)")
	}
	return nil
}

// runVM is vmm.Run; tests replace it to stage a failure.
var runVM = vmm.Run

// boot runs the VM with the terminal set up, and turns the outcome into
// tinyvmm's exit status.
func boot(cfg vmm.Config, hasCmd bool, timeout time.Duration, stdout, stderr io.Writer) int {
	cfg.Console, cfg.Log = stdout, stderr
	restore := func() {}
	if isTerminal(os.Stdin) {
		fmt.Fprintln(stderr, vmm.EscapeHelp) // before raw mode turns "\n" into a bare line feed
		var raw bool
		if restore, raw = rawTerminal(os.Stdin); raw {
			cfg.ConsoleIn, cfg.Escape = os.Stdin, true
			cfg.Log = crlfWriter{stderr}
			for i := range cfg.Nets {
				if cfg.Nets[i].Trace != nil {
					cfg.Nets[i].Trace = crlfWriter{stderr}
				}
			}
			if cfg.Trace != nil {
				cfg.Trace = crlfWriter{stderr}
			}
		}
	} else if !hasCmd {
		cfg.ConsoleIn = os.Stdin // a pipe or file of commands for the shell
	}
	defer restore()

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	errTimeout := fmt.Errorf("guest still running after %v (--timeout); stopped it", timeout)
	if timeout > 0 {
		defer time.AfterFunc(timeout, func() { cancel(errTimeout) }).Stop()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var got atomic.Int32 // the signal that stopped the guest
	go func() {
		if s, ok := <-sigs; ok {
			got.Store(int32(s.(syscall.Signal)))
			cancel(fmt.Errorf("stopped by %v", s))
		}
	}()

	status, err := runVM(ctx, cfg)
	restore() // before any message, so it starts at column 0
	if err != nil {
		// The signal is the reason only when it is what stopped the guest;
		// one that came during setup must not hide why setup failed.
		if sig := got.Load(); sig != 0 && errors.Is(err, context.Cause(ctx)) {
			fail(stderr, 0, context.Cause(ctx))
			return 128 + int(sig)
		}
		if errors.Is(err, errTimeout) {
			fail(stderr, 0, errTimeout)
			return vmm.StatusTimeout
		}
		var ge *vmm.GuestError
		if errors.As(err, &ge) {
			fail(stderr, 0, err)
			return ge.Status
		}
		if errors.Is(err, vmm.ErrGuestRebooted) {
			fail(stderr, 0, err)
			return status
		}
		return fail(stderr, exitRuntime, err)
	}
	return status
}

// runFlagGroups orders run's --help: what everyone needs first, the
// device's tuning and the debugging aids last.
var runFlagGroups = []cliflag.Group{
	{Title: "Basic flags", Names: []string{"kernel", "initrd", "append", "mem", "cpus", "timeout"}},
	{Title: "Network", Names: []string{"net", "notify"}},
	{Title: "Sharing and the guest's root", Names: []string{"share", "root", "rwdir", "share-cache"}},
	{Title: "Tuning the net device's worker", Names: []string{"tx-weight-pkts", "tx-weight-bytes", "tx-yield-pkts", "rx-weight-pkts", "rx-weight-bytes", "rx-batch", "notify-threshold", "rx-irq-us", "poll-us", "poll-lone", "worker-batch", "worker-batch-bytes"}},
	{Title: "Debugging and benchmarks", Names: []string{"stats", "trace", "bench-guest"}},
}

// check checks the flags that Config.Validate cannot see (and parses
// --notify into the Config): the tuning
// values, which reach the Config only through a --net (and whose 0 means
// "the default" there, so an explicit 0 would silently become 64 or 8), and
// the --stats file, which would otherwise fail only after the guest ran.
func (f *runFlags) check() error {
	t := f.tuning
	for _, v := range []struct {
		name string
		val  int
		min  int
	}{
		{"tx-weight-pkts", t.TxWeightPkts, 0}, {"tx-weight-bytes", t.TxWeightBytes, 0}, {"tx-yield-pkts", t.TxYieldPkts, 0},
		{"rx-weight-pkts", t.RxWeightPkts, 0}, {"rx-weight-bytes", t.RxWeightBytes, 0},
		{"rx-batch", t.RxBatch, 1}, {"notify-threshold", t.NotifyThreshold, 1},
		{"poll-us", t.PollUs, 0}, {"rx-irq-us", t.RxIrqGapUs, 0},
	} {
		switch {
		case v.val >= v.min:
		case v.min == 0:
			return fmt.Errorf("--%s %d is negative; give 0 (unlimited, or off) or more", v.name, v.val)
		default:
			return fmt.Errorf("--%s %d: give at least %d", v.name, v.val, v.min)
		}
	}
	mode, err := pci.ParseNotifyMode(f.notify)
	if err != nil {
		return fmt.Errorf("--notify %q is not one of ioeventfd, exit", f.notify)
	}
	f.cfg.Notify = mode
	return checkStatsFile(f.cfg.Stats)
}

// checkStatsFile makes sure the --stats=FILE can be written, without
// truncating an existing file or leaving a new one behind.
func checkStatsFile(path string) error {
	if path == "" || path == "-" {
		return nil
	}
	_, statErr := os.Stat(path)
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("--stats=%s: cannot write it: %v", path, err)
	}
	out.Close()
	if errors.Is(statErr, os.ErrNotExist) {
		os.Remove(path)
	}
	return nil
}
