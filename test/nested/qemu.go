package nested

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Machine is how L1 is booted.
type Machine struct {
	// Kernel is L1's kernel: a bzImage, or a vmlinux with a PVH note.
	Kernel string
	// Initramfs is the cpio that WriteInitramfs made.
	Initramfs string
	// CPU is QEMU's -cpu; DefaultCPU when empty.
	CPU string
	// MemMB is L1's memory; 2048 when zero.
	MemMB int
	// CPUs is L1's CPU count; 1 when zero. With more, TCG runs them on
	// host threads in parallel (MTTCG), so a VMM's vCPU and its device
	// worker need not take turns on one CPU.
	CPUs int
	// Append is added to the kernel command line (kvm_amd.npt=0, ...).
	Append string
	// Output receives the console, line by line, as it comes.
	Output io.Writer
	// Attempts bounds the boots when a gate step (kvmprobe) asks for a
	// retry; 4 when zero.
	Attempts int
	// Stall ends a boot whose console has been silent this long, and the
	// plan runs again in a new boot (up to maxStalls times); DefaultStall when zero. L1
	// under TCG has been seen to freeze for good (halted with its own
	// timer interrupt pending, so nothing inside L1 times out either).
	Stall time.Duration
	// Nudge is how long a silent console waits for a newline on L1's
	// serial port, again after each Nudge of silence; DefaultNudge when
	// zero.
	Nudge time.Duration
}

// DefaultNudge: the freezes seen (README.md) left L1 with its own timer
// interrupt pending in the local APIC, never delivered. A byte on the serial
// port is a new interrupt, which makes QEMU look at the APIC again: the
// first nudge tried (after 45 s) woke a frozen L1, which went on with the
// same test. A live L1 only echoes it (an empty console line).
const DefaultNudge = 10 * time.Second

// DefaultStall is far above the longest silence of a healthy run (a step
// prints at least a line a minute or two) and far below the run's timeout.
const DefaultStall = 5 * time.Minute

// maxStalls is how many frozen boots a run survives.
const maxStalls = 3

// DefaultCPU is an AMD CPU model that QEMU's TCG implements with SVM and
// nested paging: what kvm_amd in L1 needs.
const DefaultCPU = "max"

// Step is one line of the plan as l1init reported it.
type Step struct {
	Command string
	Status  int
	Seconds float64
}

// Result is what one L1 run reported.
type Result struct {
	// Status is l1init's overall status: 0 when every step passed.
	Status int
	Steps  []Step
	// KVM is true when l1init found /dev/kvm in L1.
	KVM bool
	// ToInit is the wall time from QEMU's start to l1init's first line.
	ToInit time.Duration
	// Elapsed is the wall time of the whole run.
	Elapsed time.Duration
	// Boots counts the L1 boots, retries included.
	Boots int
}

// errRetry means l1init's gate step failed and asked for another boot.
var errRetry = errors.New("L1 asked to be booted again")

// errStalled means the console went silent for Machine.Stall: L1 froze.
var errStalled = errors.New("L1 froze")

// QEMUBinary is the emulator the runner starts.
const QEMUBinary = "qemu-system-x86_64"

// qemuBinary is what bootOnce runs; tests put a script in its place.
var qemuBinary = QEMUBinary

// Boot runs L1 until l1init reports, the machine ends, or ctx is done (then
// QEMU is killed). An error means L1 gave no result; a failing step is not an
// error but a non-zero Result.Status. When the gate step fails, L1 is booted
// again, up to m.Attempts times.
func Boot(ctx context.Context, m Machine) (Result, error) {
	attempts := m.Attempts
	if attempts <= 0 {
		attempts = 4
	}
	if m.CPU == "" {
		m.CPU = DefaultCPU
	}
	if m.Stall <= 0 {
		m.Stall = DefaultStall
	}
	if m.Nudge <= 0 {
		m.Nudge = DefaultNudge
	}
	start := time.Now()
	stalls := 0
	for boot := 1; ; boot++ {
		res, err := bootOnce(ctx, m)
		res.Boots, res.Elapsed = boot, time.Since(start)
		if errors.Is(err, errStalled) && stalls < maxStalls && ctx.Err() == nil {
			stalls++
			if m.Output != nil {
				fmt.Fprintf(m.Output, "nested: %v; booting L1 again to run the whole plan once more\n", err)
			}
			continue
		}
		if err != errRetry {
			return res, err
		}
		if !res.KVM {
			return res, fmt.Errorf("L1 has no /dev/kvm: its kernel lacks KVM_AMD (guest/kernel/nested-host.config; run make guest) or -cpu %q has no svm", m.CPU)
		}
		if boot == attempts {
			return res, fmt.Errorf("kvmprobe failed in all %d L1 boots: KVM in L1 cannot run a guest (see the console above)", boot)
		}
		if m.Output != nil {
			fmt.Fprintf(m.Output, "nested: kvmprobe failed in L1 boot %d; booting L1 again\n", boot)
		}
	}
}

func bootOnce(ctx context.Context, m Machine) (Result, error) {
	cpu, mem, cpus := m.CPU, m.MemMB, max(m.CPUs, 1)
	if cpu == "" {
		cpu = DefaultCPU
	}
	if mem == 0 {
		mem = 2048
	}
	out := m.Output
	if out == nil {
		out = io.Discard
	}
	cmdline := "console=ttyS0 panic=-1 " + m.Append
	if !strings.Contains(cmdline, "tsc_early_khz=") {
		cmdline += " " + tscParam()
	}
	// No network device at all: L1 builds its own taps and namespaces.
	args := []string{
		"-accel", "tcg", "-cpu", cpu, "-smp", smpArg(cpus), "-m", strconv.Itoa(mem),
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio",
		"-nic", "none", "-no-reboot",
		"-kernel", m.Kernel, "-initrd", m.Initramfs,
		"-append", strings.TrimSpace(cmdline),
	}
	// A monitor, so that a frozen L1 can be looked at before it is killed.
	mondir, err := os.MkdirTemp("", "tinyvmm-l1mon-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(mondir)
	monitor := filepath.Join(mondir, "monitor.sock")
	args = append(args, "-monitor", "unix:"+monitor+",server=on,wait=off")
	cmd := exec.CommandContext(ctx, qemuBinary, args...)
	cmd.WaitDelay = 5 * time.Second
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	cmd.Stderr = cmd.Stdout
	serialIn, err := cmd.StdinPipe() // -serial stdio: L1's ttyS0 input
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("start %s: %v (install qemu-system-x86)", QEMUBinary, err)
	}
	var lastLine atomic.Int64 // when the console last printed a line (unix ns)
	lastLine.Store(start.UnixNano())
	var stalled atomic.Bool
	scanned := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchConsole(m, out, &lastLine, serialIn, monitor, scanned, func() {
			stalled.Store(true)
			cmd.Process.Kill()
		})
	}()
	res, tail, ending := scanConsole(pipe, out, start, func() { lastLine.Store(time.Now().UnixNano()) })
	close(scanned)
	<-watched
	waitErr := cmd.Wait()
	res.Elapsed = time.Since(start)
	switch {
	case ending == endRetry:
		return res, errRetry
	case stalled.Load() && ending != endExit:
		return res, fmt.Errorf("%w: no console line for %v after %v; last console lines:\n%s",
			errStalled, m.Stall, res.Elapsed.Round(time.Second), tail)
	case ctx.Err() != nil:
		return res, fmt.Errorf("L1 timed out after %v; last console lines:\n%s", res.Elapsed.Round(time.Second), tail)
	case ending != endExit:
		return res, fmt.Errorf("L1 ended without a result (%v); last console lines:\n%s", waitErr, tail)
	}
	return res, nil
}

// watchConsole nudges a console silent for m.Nudge with a newline on L1's
// serial port (again after every m.Nudge of silence) and, silent for
// m.Stall, prints L1's state from the monitor and calls kill. It returns
// when scanned is closed.
func watchConsole(m Machine, out io.Writer, lastLine *atomic.Int64, serialIn io.Writer, monitor string, scanned <-chan struct{}, kill func()) {
	tick := time.NewTicker(min(time.Second, m.Nudge/4, m.Stall/4))
	defer tick.Stop()
	var nudged time.Time // the last nudge in this silence
	for {
		select {
		case <-scanned:
			return
		case now := <-tick.C:
			last := time.Unix(0, lastLine.Load())
			silent := now.Sub(last)
			switch {
			case silent >= m.Stall:
				fmt.Fprintf(out, "nested: L1 silent for %v; its state (QEMU monitor):\n%s\n", m.Stall, monitorDump(monitor, freezeQueries))
				kill()
				<-scanned
				return
			case silent >= m.Nudge && now.Sub(nudged) >= m.Nudge:
				nudged = now
				fmt.Fprintf(out, "nested: L1 silent for %v (%s); a newline to its serial port\n",
					silent.Round(time.Second), freezeSummary(monitorDump(monitor, freezeQueries)))
				io.WriteString(serialIn, "\n") // an error means QEMU is gone: the scan ends
			}
		}
	}
}

// freezeSummary is one line from a monitor dump: each CPU's HLT flag and
// the vectors pending in its local APIC.
func freezeSummary(dump string) string {
	var parts []string
	for _, line := range strings.Split(dump, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && strings.HasPrefix(f[0], "CPU#"):
			parts = append(parts, f[0])
		case strings.Contains(line, " HLT="):
			parts = append(parts, line[strings.Index(line, "HLT="):][:5])
		case len(f) > 0 && f[0] == "IRR":
			parts = append(parts, "IRR "+strings.Join(f[1:], " "))
		}
	}
	if len(parts) == 0 {
		return "no monitor answer"
	}
	return strings.Join(parts, " ")
}

// freezeQueries are the monitor commands whose answers describe a frozen
// L1: where each CPU is (in L1's kernel or in an L2, halted or not, IF)
// and what its local APIC has pending.
var freezeQueries = []string{"info registers -a", "info lapic", "info irq"}

// monitorDump sends cmds to QEMU's human monitor at sock and returns the
// answers (or why there are none), within a few seconds.
func monitorDump(sock string, cmds []string) string {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return "no monitor: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, strings.Join(cmds, "\n")+"\n"); err != nil {
		return "monitor: " + err.Error()
	}
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for b.Len() < 1<<20 {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break // the deadline: QEMU has answered what it will
		}
	}
	return ansiEscape.ReplaceAllString(strings.ReplaceAll(b.String(), "\r", ""), "")
}

// ansiEscape matches the terminal control sequences the monitor's line
// editor sends.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// How the console ended.
type ending int

const (
	endNone  ending = iota // no marker: a crash or a timeout
	endExit                // NESTED-EXIT: the plan ran
	endRetry               // NESTED-RETRY: the gate failed
)

// scanConsole copies the console to out and picks up l1init's markers,
// calling alive for each line. It returns the last lines for error messages
// and how the run ended.
func scanConsole(r io.Reader, out io.Writer, start time.Time, alive func()) (Result, string, ending) {
	var res Result
	var last []string
	end := endNone
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		alive()
		line := strings.TrimRight(sc.Text(), "\r")
		fmt.Fprintln(out, line)
		if last = append(last, line); len(last) > 20 {
			last = last[1:]
		}
		switch {
		case strings.HasPrefix(line, "l1init: kernel reached init"):
			res.ToInit = time.Since(start)
		case line == "l1init: /dev/kvm present":
			res.KVM = true
		case strings.HasPrefix(line, "NESTED-STEP "):
			if s, ok := parseStep(strings.TrimPrefix(line, "NESTED-STEP ")); ok {
				res.Steps = append(res.Steps, s)
			}
		case strings.HasPrefix(line, "NESTED-EXIT "):
			if n, err := strconv.Atoi(strings.TrimPrefix(line, "NESTED-EXIT ")); err == nil {
				res.Status, end = n, endExit
			}
		case line == "NESTED-RETRY":
			end = endRetry
		}
	}
	return res, strings.Join(last, "\n"), end
}

// parseStep reads "status=N seconds=F cmd=WORDS...".
func parseStep(s string) (Step, bool) {
	var st Step
	status, rest, ok1 := strings.Cut(strings.TrimPrefix(s, "status="), " seconds=")
	secs, cmd, ok2 := strings.Cut(rest, " cmd=")
	n, err1 := strconv.Atoi(status)
	f, err2 := strconv.ParseFloat(secs, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return st, false
	}
	return Step{Command: cmd, Status: n, Seconds: f}, true
}

// Missing says, in one line, why a nested run cannot happen here (empty when
// it can): no QEMU, no L1 kernel at kernel, or a kernel whose kernel.config
// (written next to it by make guest) shows no KVM_AMD.
func Missing(kernel string) string {
	if _, err := exec.LookPath(QEMUBinary); err != nil {
		return QEMUBinary + " not found: apt-get install qemu-system-x86"
	}
	if _, err := os.Stat(kernel); errors.Is(err, os.ErrNotExist) {
		return "no L1 kernel at " + kernel + ": run make guest"
	} else if err != nil {
		return err.Error()
	}
	config, err := os.ReadFile(filepath.Join(filepath.Dir(kernel), "kernel.config"))
	if err == nil && !strings.Contains(string(config), "\nCONFIG_KVM_AMD=y\n") {
		return kernel + " was built without KVM_AMD, so it cannot be the L1 host: run make guest (guest/kernel/nested-host.config adds it)"
	}
	return ""
}

// smpArg makes each CPU a socket of its own: L1's kernel has no ACPI and
// finds CPUs in SeaBIOS's MP table, which lists one CPU per package, and
// QEMU's -smp N alone makes N cores of one package.
func smpArg(cpus int) string {
	return fmt.Sprintf("%d,sockets=%d,cores=1,threads=1", cpus, cpus)
}
