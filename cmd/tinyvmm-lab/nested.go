package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"tinyvmm/test/nested"
)

const nestedUsage = `Usage: tinyvmm-lab nested [flags] [-- COMMAND LINE]

Runs tinyvmm's KVM tests inside an L1 Linux with KVM_AMD that QEMU emulates
with TCG, for hosts without a usable /dev/kvm; it builds what L1 needs from
the repository (Go and 'make guest' needed):

  tinyvmm-lab nested -pkg ./kvm/... -pkg ./vmm [-- run --mem 256M -- true]
  tinyvmm-lab nested -lab -with-qemu -- bench e2e --runs 3
  tinyvmm-lab nested -log l1.log -file ./mytest -- run --share . -- ./mytest

Arguments after -- are a tinyvmm command line (with -lab, a tinyvmm-lab
one) run after the tests; each -run is one more command line run after
that (e.g. -run 'busybox base64 /tmp/tx.prof'); -with-qemu puts the host's
QEMU into L1 (for bench e2e's and bench boot's QEMU columns). Each -file
goes into L1's /files, where the command line and -run then run (and
with --share . on into the guest). With -log, stdout shows only what the
tests and command lines print; L1's boot and the runner's own lines go to
the log, whose last lines are printed when the run fails. It exits 0
when kvmprobe, every test binary, the command line and every -run command
passed in L1, 1 when one failed, 2 when L1 could not be built or booted.

Flags:`

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func nestedMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nested", flag.ContinueOnError)
	var pkgs, testArgs, runs listFlag
	repo := fs.String("repo", "", "repository root (default: the one holding the working directory or this command)")
	kernel := fs.String("kernel", "", "L1 kernel (default: out/guest/bzImage of the repository)")
	qemuBin, qemuFirmware := nested.QEMUFromEnv()
	qemu := fs.String("qemu", qemuBin, "the emulator that runs L1 ($"+nested.EnvQEMU+" changes the default)")
	firmware := listFlag(qemuFirmware)
	fs.Var(&firmware, "firmware", "a `DIR` the emulator searches first for its firmware, its -L (repeatable; after those of $"+nested.EnvFirmware+", colon-separated)")
	cpu := fs.String("cpu", nested.DefaultCPU, "QEMU -cpu for L1")
	mem := fs.Int("mem", 2048, "L1 memory in MiB")
	smp := fs.Int("smp", 1, "L1 CPUs (TCG runs them on parallel host threads)")
	appendArgs := fs.String("append", "", "extra L1 kernel command line")
	timeout := fs.Duration("timeout", 25*time.Minute, "bound on the whole run, build included")
	testTimeout := fs.Duration("test-timeout", 10*time.Minute, "bound on each test binary inside L1")
	probe := fs.Int("probe-exits", 10000, "port-I/O exits kvmprobe times first (0: skip kvmprobe)")
	stall := fs.Duration("stall", nested.DefaultStall, "a console silent this long means L1 froze: its state is printed and the run fails")
	keep := fs.Bool("keep", false, "keep the scratch directory with the initramfs")
	lab := fs.Bool("lab", false, "the command line after -- is a tinyvmm-lab one (bench e2e, bench boot, ...)")
	withQEMU := fs.Bool("with-qemu", false, "put the host's "+nested.QEMUBinary+" (libraries, bench firmware) into L1")
	withPerf := fs.Bool("perf", false, "run the command line under the host's perf record -a in L1 and print perf report by thread and symbol (apt-get install linux-perf)")
	withSwitches := fs.Bool("perf-switches", false, "run the command line under perf record of every context switch in L1 and print the record, gzipped in base64, between NESTED-SWITCHES-BEGIN and -END (bench/nested.sh NESTED_SWITCHES)")
	fs.Var(&pkgs, "pkg", "package whose tests run in L1 (repeatable; patterns allowed)")
	fs.Var(&runs, "run", "a command line run in L1's /repo last (repeatable; no shell: words split on spaces)")
	fs.Var(&testArgs, "test-arg", "argument for every test binary, e.g. -test.run=Boot (repeatable)")
	var tools, hostFiles listFlag
	fs.Var(&hostFiles, "file", "a host file or directory to put into L1's "+nested.FilesDir+" (repeatable); the command line and -run then run there")
	logName := fs.String("log", "", "append L1's console and the runner's own lines to this `FILE`; stdout gets only the output of the tests and command lines")
	fs.Var(&tools, "tool", "a host program (a path or a name in $PATH) to put into L1 with its libraries, at its own path (repeatable; bench/nested.sh: iperf3)")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), nestedUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return exitUsage
	}
	var log *runLog
	logTo := stderr
	if *logName != "" {
		var err error
		if log, err = openRunLog(*logName); err != nil {
			fmt.Fprintln(stderr, "nested: error:", err)
			return exitUsage
		}
		defer log.Close()
		logTo = log
	}
	logf := func(format string, args ...any) { fmt.Fprintf(logTo, "nested: "+format+"\n", args...) }
	// With a log, a failure shows the log's last lines, then where the
	// whole log is.
	failed := func(status int) int {
		if log != nil {
			fmt.Fprintf(stderr, "nested: the log's last lines:\n%s", log.Tail())
			fmt.Fprintf(stderr, "nested: FAIL (status %d); L1's console and the runner's lines: %s\n", status, *logName)
		}
		return status
	}
	failf := func(msg string) int {
		fmt.Fprintln(logTo, "nested: error:", msg)
		if log != nil {
			fmt.Fprintln(stderr, "nested: error:", msg)
		}
		return failed(exitUsage)
	}

	if *repo == "" {
		if *repo = findRepo(); *repo == "" {
			return failf("no tinyvmm repository holds the working directory or this command: give -repo")
		}
	}
	if *kernel == "" {
		*kernel = filepath.Join(*repo, "out", "guest", "bzImage")
	}
	if *smp < 1 || *smp > 64 {
		return failf(fmt.Sprintf("-smp %d: want 1..64 CPUs", *smp))
	}
	if why := nested.Missing(*qemu, *kernel); why != "" {
		return failf(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	work, err := os.MkdirTemp("", "tinyvmm-nested-")
	if err != nil {
		return failf(err.Error())
	}
	if *keep {
		logf("scratch directory: %s", work)
	} else {
		defer os.RemoveAll(work)
	}
	plan := nested.Plan{
		Packages:    pkgs,
		TestArgs:    append([]string{"-test.v"}, testArgs...),
		TestTimeout: *testTimeout,
		Tinyvmm:     fs.Args(),
		Lab:         *lab,
		Commands:    runs,
		ProbeExits:  *probe,
		Tools:       tools,
		Files:       hostFiles,
	}
	if *withQEMU {
		plan.QEMU = nested.QEMUBinary
	}
	if *withPerf || *withSwitches {
		perf, err := exec.LookPath("perf")
		if err != nil {
			return failf("-perf, -perf-switches: no perf on this host: apt-get install linux-perf")
		}
		plan.Perf, plan.PerfSwitches = perf, *withSwitches
	}
	start := time.Now()
	files, lines, err := nested.Assemble(ctx, *repo, work, plan, logf)
	if err != nil {
		return failf(err.Error())
	}
	initramfs := filepath.Join(work, "initramfs.cpio")
	if err := writeInitramfs(initramfs, files, lines); err != nil {
		return failf(err.Error())
	}
	logf("built in %v; booting L1 (%s, -cpu %s, %d CPU(s)) under TCG of %s (%s, firmware first from %q); plan:\n  %s",
		time.Since(start).Round(time.Second), *kernel, *cpu, *smp, nested.QEMUVersion(*qemu), *qemu, []string(firmware), strings.Join(lines, "\n  "))

	m := nested.Machine{
		Kernel: *kernel, Initramfs: initramfs, QEMU: *qemu, Firmware: firmware, CPU: *cpu, MemMB: *mem, CPUs: *smp, Append: *appendArgs, Output: stdout, Stall: *stall,
	}
	if log != nil {
		m.Log = log
	}
	res, err := nested.Boot(ctx, m)
	if err != nil {
		logf("%s", res.WakeSummary())
		return failf(err.Error())
	}
	logf("L1 reached init after %v; KVM in L1: %v; run took %v", res.ToInit.Round(100*time.Millisecond), res.KVM, res.Elapsed.Round(time.Second))
	logf("%s", res.WakeSummary())
	for _, s := range res.Steps {
		logf("  status %3d  %6.1fs  %s", s.Status, s.Seconds, s.Command)
	}
	if res.Status != 0 {
		logf("FAIL: status %d", res.Status)
		return failed(exitRuntime)
	}
	logf("PASS")
	if log != nil {
		fmt.Fprintf(stderr, "nested: PASS in %v; L1's console and the runner's lines: %s\n", time.Since(start).Round(time.Second), *logName)
	}
	return 0
}

// runLog is the -log file: everything the runner and L1's console say,
// with its last lines kept for a failure's report.
type runLog struct {
	f    *os.File
	mu   sync.Mutex
	tail []string
	part string
}

// logTail is how many lines of the log a failure prints.
const logTail = 40

func openRunLog(name string) (*runLog, error) {
	if dir := filepath.Dir(name); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	// Appended to: make run-nested writes its build's output there first.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &runLog{f: f}, nil
}

// Write is called from the console's reader and the runner's watch.
func (l *runLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(l.part+string(p), "\n")
	l.part = lines[len(lines)-1]
	l.tail = append(l.tail, lines[:len(lines)-1]...)
	if len(l.tail) > logTail {
		l.tail = l.tail[len(l.tail)-logTail:]
	}
	return l.f.Write(p)
}

// Tail is the log's last lines.
func (l *runLog) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, line := range l.tail {
		b.WriteString("  " + line + "\n")
	}
	if l.part != "" {
		b.WriteString("  " + l.part + "\n")
	}
	return b.String()
}

func (l *runLog) Close() error { return l.f.Close() }

func writeInitramfs(name string, files []nested.File, plan []string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := nested.WriteInitramfs(f, files, plan); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// findRepo returns the tinyvmm repository holding the working directory
// or this command (bin/tinyvmm-lab of a checkout), or "".
func findRepo() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, "test", "nested", "l1init")); err == nil {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}
