// Command nested runs tinyvmm's KVM tests inside an L1 Linux with KVM_AMD that
// QEMU emulates with TCG, for hosts without a usable /dev/kvm:
//
//	go run ./test/nested/cmd/nested -pkg ./kvm/... -pkg ./vmm [-- run --mem 256M -- true]
//
// Arguments after -- are a tinyvmm command line run after the tests; each
// -run is one more command line run after that (e.g. -run 'busybox base64
// /tmp/tx.prof'); -with-qemu puts the host's QEMU into L1 (for bench e2e's
// QEMU column). It exits with L1's status: 0 when kvmprobe, every test
// binary, tinyvmm and every -run command passed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"tinyvmm/test/nested"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var pkgs, testArgs, runs listFlag
	repo := flag.String("repo", ".", "repository root")
	kernel := flag.String("kernel", "", "L1 kernel (default: out/guest/bzImage of the repository)")
	cpu := flag.String("cpu", nested.DefaultCPU, "QEMU -cpu for L1")
	mem := flag.Int("mem", 2048, "L1 memory in MiB")
	smp := flag.Int("smp", 1, "L1 CPUs (TCG runs them on parallel host threads)")
	appendArgs := flag.String("append", "", "extra L1 kernel command line")
	timeout := flag.Duration("timeout", 25*time.Minute, "bound on the whole run, build included")
	testTimeout := flag.Duration("test-timeout", 10*time.Minute, "bound on each test binary inside L1")
	probe := flag.Int("probe-exits", 10000, "port-I/O exits kvmprobe times first (0: skip kvmprobe)")
	stall := flag.Duration("stall", nested.DefaultStall, "a console silent this long means L1 froze: its state is printed, and it is booted again once")
	keep := flag.Bool("keep", false, "keep the scratch directory with the initramfs")
	withQEMU := flag.Bool("with-qemu", false, "put the host's "+nested.QEMUBinary+" (libraries, bench firmware) into L1")
	withPerf := flag.Bool("perf", false, "run the tinyvmm command under the host's perf record -a in L1 and print perf report by thread and symbol (apt-get install linux-perf)")
	flag.Var(&pkgs, "pkg", "package whose tests run in L1 (repeatable; patterns allowed)")
	flag.Var(&runs, "run", "a command line run in L1's /repo last (repeatable; no shell: words split on spaces)")
	flag.Var(&testArgs, "test-arg", "argument for every test binary, e.g. -test.run=Boot (repeatable)")
	var tools listFlag
	flag.Var(&tools, "tool", "a host program (a path or a name in $PATH) to put into L1 with its libraries, at its own path (repeatable; bench/nested.sh: iperf3)")
	flag.Parse()

	if *kernel == "" {
		*kernel = filepath.Join(*repo, "out", "guest", "bzImage")
	}
	if *smp < 1 || *smp > 64 {
		fail(fmt.Sprintf("-smp %d: want 1..64 CPUs", *smp))
	}
	if why := nested.Missing(*kernel); why != "" {
		fail(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	work, err := os.MkdirTemp("", "tinyvmm-nested-")
	if err != nil {
		fail(err.Error())
	}
	if *keep {
		logf("scratch directory: %s", work)
	} else {
		cleanup = func() { os.RemoveAll(work) }
	}
	plan := nested.Plan{
		Packages:    pkgs,
		TestArgs:    append([]string{"-test.v"}, testArgs...),
		TestTimeout: *testTimeout,
		Tinyvmm:     flag.Args(),
		Commands:    runs,
		ProbeExits:  *probe,
		Tools:       tools,
	}
	if *withQEMU {
		plan.QEMU = nested.QEMUBinary
	}
	if *withPerf {
		perf, err := exec.LookPath("perf")
		if err != nil {
			fail("-perf: no perf on this host: apt-get install linux-perf")
		}
		plan.Perf = perf
	}
	start := time.Now()
	files, lines, err := nested.Assemble(ctx, *repo, work, plan, logf)
	if err != nil {
		fail(err.Error())
	}
	initramfs := filepath.Join(work, "initramfs.cpio")
	if err := writeInitramfs(initramfs, files, lines); err != nil {
		fail(err.Error())
	}
	logf("built in %v; booting L1 (%s, -cpu %s, %d CPU(s)) under TCG; plan:\n  %s",
		time.Since(start).Round(time.Second), *kernel, *cpu, *smp, strings.Join(lines, "\n  "))

	res, err := nested.Boot(ctx, nested.Machine{
		Kernel: *kernel, Initramfs: initramfs, CPU: *cpu, MemMB: *mem, CPUs: *smp, Append: *appendArgs, Output: os.Stdout, Stall: *stall,
	})
	if err != nil {
		fail(err.Error())
	}
	logf("L1 reached init after %v (last boot); KVM in L1: %v; %d boot(s); run took %v", res.ToInit.Round(100*time.Millisecond), res.KVM, res.Boots, res.Elapsed.Round(time.Second))
	for _, s := range res.Steps {
		logf("  status %3d  %6.1fs  %s", s.Status, s.Seconds, s.Command)
	}
	cleanup()
	if res.Status != 0 {
		logf("FAIL: status %d", res.Status)
		os.Exit(1)
	}
	logf("PASS")
}

// cleanup removes the scratch directory unless -keep; os.Exit skips
// deferred calls, so every exit path calls it.
var cleanup = func() {}

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

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nested: "+format+"\n", args...)
}

func fail(msg string) {
	cleanup()
	fmt.Fprintln(os.Stderr, "nested: error:", msg)
	os.Exit(2)
}
