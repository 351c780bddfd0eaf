package nested

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	// QEMU is the emulator (a path or a name in $PATH); QEMUBinary when
	// empty.
	QEMU string
	// Firmware are directories QEMU searches first for its firmware (its
	// -L), for a QEMU whose files are not where it was built to look
	// (one unpacked from its packages into a directory of its own).
	Firmware []string
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
	// Output receives the console, line by line, as it comes; with Log
	// set, only the output of the plan's steps (see Log).
	Output io.Writer
	// Log, when set, receives the whole console and the runner's own
	// lines (lost interrupts woken, a silent console, a freeze), and
	// Output only what the plan's steps print: L1's command line gets
	// MarkParam, so l1init prints each line of a step (not of the gate,
	// kvmprobe) after OutMarker, which tells it apart from L1's boot and
	// its kernel's messages. So a user sees the command's output only.
	Log io.Writer
	// Stall ends a boot whose console has been silent this long, with an
	// error and L1's state from QEMU's monitor; DefaultStall when zero.
	Stall time.Duration
	// Watch is how often the runner reads each L1 CPU's local APIC from
	// QEMU's monitor, to wake a CPU that QEMU left with an interrupt it
	// never delivers (see lostInterruptWatch); DefaultWatch when zero.
	Watch time.Duration
}

// DefaultStall is far above the longest silence of a healthy run (a step
// prints at least a line a minute or two) and far below the run's timeout.
const DefaultStall = 5 * time.Minute

// DefaultWatch: a lost interrupt costs L1 about three of these.
const DefaultWatch = 400 * time.Millisecond

// lostSamples is how many reads in a row must find the same CPU with a
// deliverable vector pending before the runner wakes it. A CPU takes such
// a vector within microseconds of running with interrupts enabled, so
// three reads (about a second) in a row mean it is not coming; should the
// CPU merely have been kept off the host's CPU or have run that long with
// interrupts off, the wake costs it one byte on its serial port.
const lostSamples = 3

// lossProof is how long a vector that lostSamples reads found pending
// must stay pending, read every lossProofEvery, before the runner wakes
// its CPU. Three reads 400 ms apart cannot tell one vector that is never
// taken from a periodic one taken every time and raised again before the
// next read: l1init's PIT raises vector 48 every 10 ms, and a vCPU that
// TCG runs slowly keeps it pending a good part of each period. A lost
// vector stays pending through every read; a PIT tick's is gone within a
// few periods.
const (
	lossProof      = 200 * time.Millisecond
	lossProofEvery = 5 * time.Millisecond
)

// silenceReport is how often a silent console gets a line with L1's state
// (each CPU's HLT flag and pending vectors), for the log only.
const silenceReport = 30 * time.Second

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
	// Wakes counts the lost interrupts the runner ended: each time a CPU
	// of L1 held a deliverable vector for lostSamples reads in a row.
	Wakes int
	// WakeLog has one line per wake: the CPU, the vector, HLT and when.
	WakeLog []string
	// Masked counts the watch's reads that found a deliverable vector
	// while its CPU had interrupts off; Starved, the vectors left pending
	// because the host kept the vCPU thread off its CPU. Not losses: they
	// are not woken, only counted.
	Masked, Starved int
	// Rearmed counts reads that found the timer's vector pending while
	// L1 was still programming its timer: a timer that fires as soon as
	// it is set, not a lost one.
	Rearmed int
	// Taken counts vectors that lostSamples reads found pending and L1
	// then took by itself within lossProof: pending at each read, not
	// lost (a periodic vector raised again between the reads).
	Taken int
}

// WakeSummary is the run's closing count of wakes, one line per wake
// after it: "L1 wakes: N" is what CI counts, and any N above 0 means L1
// needed the runner to go on.
func (r Result) WakeSummary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "L1 wakes: %d (not losses, not woken: %d reads with interrupts off, %d with L1's timer programmed again, %d times the vCPU thread was off the host CPU, %d vectors L1 took within %v of the reads)", r.Wakes, r.Masked, r.Rearmed, r.Starved, r.Taken, lossProof)
	for i, w := range r.WakeLog {
		fmt.Fprintf(&b, "\n  wake %d: %s", i+1, w)
	}
	return b.String()
}

// errGate means l1init's gate step (kvmprobe) failed.
var errGate = errors.New("the gate step failed in L1")

// errStalled means the console went silent for Machine.Stall: L1 froze.
var errStalled = errors.New("L1 froze")

// QEMUBinary is the emulator the runner starts unless told otherwise.
const QEMUBinary = "qemu-system-x86_64"

// qemuBinary is what Boot runs when Machine.QEMU is empty; tests put a
// script in its place.
var qemuBinary = QEMUBinary

// EnvQEMU names another emulator for L1 (a path or a name in $PATH), and
// EnvFirmware its firmware directories (colon-separated, each QEMU's -L):
// how the nested test and the runner are pointed at a QEMU unpacked
// beside the installed one, to compare the two.
const (
	EnvQEMU     = "TINYVMM_NESTED_QEMU"
	EnvFirmware = "TINYVMM_NESTED_QEMU_FIRMWARE"
)

// L0Dir is where fetch-l0-qemu.sh unpacks bookworm-backports' QEMU, in the
// user's cache directory as Go keeps its build cache; "" without one.
func L0Dir() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "tinyvmm", "l0-qemu")
}

// QEMUFromEnv is the emulator for L1 and its firmware directories:
// EnvQEMU's, else the QEMU in L0Dir when fetch-l0-qemu.sh has unpacked one
// (Linux L2 guests die under the installed 7.2's TCG: README.md, "Which
// QEMU"), else QEMUBinary from $PATH. EnvFirmware, when set, names the
// firmware directories of any of them.
func QEMUFromEnv() (bin string, firmware []string) {
	bin = os.Getenv(EnvQEMU)
	if bin == "" {
		bin = QEMUBinary
		if dir := L0Dir(); dir != "" {
			l0 := filepath.Join(dir, "usr", "bin", QEMUBinary)
			if st, err := os.Stat(l0); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				bin = l0
				firmware = []string{filepath.Join(dir, "usr", "share", "qemu"), filepath.Join(dir, "usr", "share", "seabios")}
			}
		}
	}
	if env := os.Getenv(EnvFirmware); env != "" {
		firmware = nil
		for _, d := range strings.Split(env, ":") {
			if d != "" {
				firmware = append(firmware, d)
			}
		}
	}
	return bin, firmware
}

// QEMUVersion is the first line of bin --version ("QEMU emulator version
// 7.2.22 (Debian ...)"), or why there is none: a run's log says which
// emulator it measured.
func QEMUVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return fmt.Sprintf("%s --version: %v", bin, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

// Boot runs L1 once, until l1init reports, the machine ends, or ctx is
// done (then QEMU is killed). An error means L1 gave no result: a failed
// gate step (kvmprobe), a console silent for m.Stall (with L1's state from
// QEMU's monitor), a timeout or a crash. A failing step is not an error but
// a non-zero Result.Status. L1 is never booted again: a second boot would
// hide what went wrong in the first.
func Boot(ctx context.Context, m Machine) (Result, error) {
	if m.CPU == "" {
		m.CPU = DefaultCPU
	}
	if m.Stall <= 0 {
		m.Stall = DefaultStall
	}
	if m.Watch <= 0 {
		m.Watch = DefaultWatch
	}
	res, err := bootOnce(ctx, m)
	if errors.Is(err, errGate) && !res.KVM {
		return res, fmt.Errorf("L1 has no /dev/kvm: its kernel lacks KVM_AMD (guest/kernel/nested-host.config; run make guest) or -cpu %q has no svm", m.CPU)
	}
	return res, err
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
	// console gets every console line and the runner's own; steps, when
	// set, only the steps' output.
	console, steps := out, io.Writer(nil)
	if m.Log != nil {
		console, steps = m.Log, out
	}
	cmdline := "console=ttyS0 panic=-1 " + m.Append
	if m.Log != nil {
		cmdline += " " + MarkParam
	}
	if !strings.Contains(cmdline, "tsc_early_khz=") {
		cmdline += " " + tscParam()
	}
	// No network device at all: L1 builds its own taps and namespaces.
	bin := m.QEMU
	if bin == "" {
		bin = qemuBinary
	}
	var args []string
	for _, d := range m.Firmware {
		args = append(args, "-L", d)
	}
	args = append(args,
		"-accel", "tcg", "-cpu", cpu, "-smp", smpArg(cpus), "-m", strconv.Itoa(mem),
		"-nodefaults", "-no-user-config", "-display", "none", "-serial", "stdio",
		"-nic", "none", "-no-reboot",
		// Thread names ("CPU 0/TCG"): the watch finds the vCPU threads by them.
		"-name", "tinyvmm-l1,debug-threads=on",
		"-kernel", m.Kernel, "-initrd", m.Initramfs,
		"-append", strings.TrimSpace(cmdline),
	)
	// A monitor: the watch reads L1's local APICs through it, and a frozen
	// L1 is looked at before it is killed.
	mondir, err := os.MkdirTemp("", "tinyvmm-l1mon-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(mondir)
	monitor := filepath.Join(mondir, "monitor.sock")
	args = append(args, "-monitor", "unix:"+monitor+",server=on,wait=off")
	cmd := exec.CommandContext(ctx, bin, args...)
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
		return Result{}, fmt.Errorf("start %s: %v (install qemu-system-x86)", bin, err)
	}
	var lastLine atomic.Int64 // when the console last printed a line (unix ns)
	lastLine.Store(start.UnixNano())
	var stalled atomic.Bool
	scanned := make(chan struct{})
	watched := make(chan watchResult, 1)
	go func() {
		watched <- watchL1(m, cpus, cmd.Process.Pid, console, &lastLine, serialIn, monitor, scanned, func() {
			stalled.Store(true)
			cmd.Process.Kill()
		})
	}()
	res, tail, ending := scanConsole(pipe, console, steps, start, func() { lastLine.Store(time.Now().UnixNano()) })
	close(scanned)
	w := <-watched
	res.Wakes, res.WakeLog, res.Masked, res.Rearmed, res.Starved, res.Taken = len(w.wakes), w.wakes, w.masked, w.rearmed, w.starved, w.taken
	waitErr := cmd.Wait()
	res.Elapsed = time.Since(start)
	switch {
	case ending == endRetry:
		return res, fmt.Errorf("%w: KVM in L1 cannot run a guest (see the console above); last console lines:\n%s", errGate, tail)
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

// watchResult is what watchL1 did.
type watchResult struct {
	wakes []string
	// masked counts reads that found a deliverable vector while its CPU
	// ran with interrupts off; starved, the times a vector stayed pending
	// because the host did not run the vCPU thread. Neither is a loss.
	masked, starved int
	// rearmed counts reads that found L1's timer vector pending with the
	// timer programmed again (lostInterruptWatch.rearmed).
	rearmed int
	// taken counts vectors lostSamples reads found pending that L1 took
	// within lossProof (stillPending).
	taken int
}

// minVCPURun is how long a vCPU thread that is not halted must have run on
// a host CPU while a vector stayed pending before that vector counts as
// lost: a CPU takes a deliverable vector within microseconds of running
// with interrupts on.
const minVCPURun = 100 * time.Millisecond

// canTakeInterrupt says from `info registers N` whether the CPU accepts
// an interrupt: halted, or IF (bit 9) set in RFLAGS (EFL= outside long
// mode). An answer without flags says yes.
func canTakeInterrupt(regs string) bool {
	if strings.Contains(regs, "HLT=1") {
		return true
	}
	for _, f := range strings.Fields(regs) {
		for _, key := range []string{"RFL=", "EFL="} {
			if v, ok := strings.CutPrefix(f, key); ok {
				n, err := strconv.ParseUint(v, 16, 64)
				return err != nil || n&0x200 != 0
			}
		}
	}
	return true
}

// watchL1 reads each L1 CPU's local APIC through QEMU's monitor every
// m.Watch, and wakes a CPU that keeps a deliverable vector pending (see
// lostInterruptWatch). It also reports a console silent for each
// silenceReport (L1's state, for the log), and when the console has been
// silent for m.Stall it prints L1's state and calls kill. It returns when
// scanned is closed.
//
// Why the wake: QEMU's TCG (7.2 and 10.0 alike, read in its source) can
// lose the request by which its I/O thread tells a running vCPU to look at
// its local APIC.
// The APIC timer fires on the I/O thread, which sets CPU_INTERRUPT_POLL in
// the vCPU's interrupt_request; the vCPU thread, in the SVM emulation's
// VMRUN helper (target/i386/tcg/sysemu/svm_helper.c), or-s
// CPU_INTERRUPT_VIRQ into the same word without the lock the I/O thread
// holds, whenever the VMCB requests a virtual interrupt, as KVM's
// interrupt window does for a Linux L2. When the two read-modify-writes
// meet, the poll request is gone: the timer's vector stays in the APIC's
// IRR above the processor priority and the CPU never takes it, halted or
// running. L1's next timer is programmed by the handler of this one, so
// nothing inside L1 ever fires again (the freezes of test/nested/README).
// Any interrupt that reaches the APIC from another thread makes the vCPU
// poll its APIC again and take the lost vector with it: one byte on L1's
// serial port is such an interrupt. l1init's 100 Hz PIT is another, so
// most losses end within a tick; the watch ends the rest, and also wakes a
// vCPU that the loaded host kept off the CPU for a second (harmless).
func watchL1(m Machine, cpus, pid int, out io.Writer, lastLine *atomic.Int64, serialIn io.Writer, monitor string, scanned <-chan struct{}, kill func()) watchResult {
	var w watchResult
	tick := time.NewTicker(min(m.Watch, m.Stall/4))
	defer tick.Stop()
	var mon *hmp
	defer func() {
		if mon != nil {
			mon.Close()
		}
	}()
	ask := func(cmds ...string) string {
		if mon == nil {
			var err error
			if mon, err = dialHMP(monitor, 2*time.Second); err != nil {
				mon = nil
				return "no monitor: " + err.Error()
			}
		}
		var b strings.Builder
		for _, c := range cmds {
			ans, err := mon.do(c, 10*time.Second)
			if err != nil {
				mon.Close()
				mon = nil
				return b.String() + "monitor: " + err.Error()
			}
			if len(cmds) > 1 {
				b.WriteString(hmpPrompt + c + "\n")
			}
			b.WriteString(ans)
		}
		return b.String()
	}
	lost := lostInterruptWatch{need: lostSamples}
	// What the host's scheduler did with QEMU's vCPU and I/O threads since
	// each CPU's vector was first seen pending: a lost interrupt leaves the
	// vCPU running, a starved vCPU has waited for a host CPU instead.
	type episode struct {
		at        time.Time
		vcpu, io  threadSched
		vcpuKnown bool
	}
	episodes := map[int]episode{}
	var tids map[int]int
	var reported time.Duration // the silence last reported
	for {
		select {
		case <-scanned:
			w.rearmed = lost.rearmed
			return w
		case now := <-tick.C:
			silent := now.Sub(time.Unix(0, lastLine.Load()))
			if silent >= m.Stall {
				fmt.Fprintf(out, "nested: L1 silent for %v; its state (QEMU monitor):\n%s\n", m.Stall, ask(freezeQueries...))
				kill()
				<-scanned
				w.rearmed = lost.rearmed
				return w
			}
			if silent < silenceReport {
				reported = 0
			} else if silent-reported >= silenceReport {
				reported = silent
				fmt.Fprintf(out, "nested: L1 console silent for %v (%s)\n", silent.Round(time.Second), freezeSummary(ask("info registers -a", "info lapic")))
			}
			for c := 0; c < cpus; c++ {
				st, ok := parseLapic(ask(fmt.Sprintf("info lapic %d", c)))
				if !ok {
					continue
				}
				var regs string
				if st.Deliverable() >= 0 {
					// Pending while the CPU runs with interrupts off (in a
					// handler, or programming the next timer) is no loss:
					// such a read starts the count over.
					regs = ask(fmt.Sprintf("info registers %d", c))
					if !canTakeInterrupt(regs) {
						w.masked++
						st.IRR = nil
					}
				}
				vec, wake := lost.sample(c, st)
				if lost.count[c] == 1 {
					if len(tids) < cpus {
						tids = vcpuThreads(pid)
					}
					e := episode{at: time.Now()}
					e.io, _ = readThreadSched(pid, pid)
					if tid, ok := tids[c]; ok {
						e.vcpu, e.vcpuKnown = readThreadSched(pid, tid)
					}
					episodes[c] = e
				}
				if e, ok := episodes[c]; wake && ok && e.vcpuKnown {
					// A vCPU thread the host kept off its CPU lost nothing:
					// it takes the vector as soon as it runs.
					now, ok := readThreadSched(pid, tids[c])
					wall := time.Since(e.at)
					halted := strings.Contains(regs, "HLT=1")
					if ok && ((!halted && now.Run-e.vcpu.Run < minVCPURun) || (halted && now.Wait-e.vcpu.Wait > wall/2)) {
						w.starved++
						fmt.Fprintf(out, "nested: L1 CPU#%d vector %d pending, not woken: its vCPU thread %s (the host kept it off its CPU)\n",
							c, vec, schedDelta(e.vcpu, now, wall))
						continue
					}
				}
				if wake {
					if after, pending := stillPending(ask, c, vec, lossProof, lossProofEvery); !pending {
						w.taken++
						fmt.Fprintf(out, "nested: L1 CPU#%d vector %d pending in %d reads, not woken: L1 took it %v later\n",
							c, vec, lostSamples, after.Round(time.Millisecond))
						continue
					}
					silent := max(time.Since(time.Unix(0, lastLine.Load())), 0)
					line := fmt.Sprintf("CPU#%d vector %d (PPR %#02x, %s) at %v", c, vec, st.PPR,
						cpuSummary(ask(fmt.Sprintf("info registers %d", c))), silent.Round(time.Second))
					if e, ok := episodes[c]; ok {
						wall := time.Since(e.at)
						if now, ok := readThreadSched(pid, tids[c]); ok && e.vcpuKnown {
							line += "; vCPU thread " + schedDelta(e.vcpu, now, wall) +
								" (states " + threadStates(pid, tids[c], 8, 5*time.Millisecond) + ")"
						}
						if now, ok := readThreadSched(pid, pid); ok {
							line += "; I/O thread " + schedDelta(e.io, now, wall)
						}
					}
					w.wakes = append(w.wakes, line)
					fmt.Fprintf(out, "nested: L1 WAKE %d: lost an interrupt: %s of silence; a byte on its serial port wakes it (QEMU TCG, see watchL1)\n", len(w.wakes), line)
					io.WriteString(serialIn, "\n") // an error means QEMU is gone: the scan ends
				}
			}
		}
	}
}

// stillPending reads CPU cpu's local APIC every `every` for up to `proof`
// and says whether vector vec stayed deliverable throughout; when it did
// not, after is when a read first found it taken (or the APIC timer whose
// vector it is counting down again: L1 took the expiry and set the next).
// Reads the monitor cannot answer prove nothing either way.
func stillPending(ask func(...string) string, cpu, vec int, proof, every time.Duration) (after time.Duration, pending bool) {
	start := time.Now()
	for {
		time.Sleep(every)
		after = time.Since(start)
		if st, ok := parseLapic(ask(fmt.Sprintf("info lapic %d", cpu))); ok {
			if st.Deliverable() != vec || st.timerCountsDown(vec) {
				return after, false
			}
		}
		if after >= proof {
			return after, true
		}
	}
}

// lostInterruptWatch decides from successive reads of each CPU's local
// APIC when an interrupt was lost: the same deliverable vector pending in
// need reads in a row.
type lostInterruptWatch struct {
	need  int
	vec   map[int]int    // CPU -> the deliverable vector of the last read
	count map[int]int    // CPU -> reads in a row that found it
	init  map[int]uint64 // CPU -> the APIC timer's initial count at the first of them
	// rearmed counts reads that found the timer's vector pending with the
	// timer programmed again since (L1 is taking its timer interrupts).
	rearmed int
}

// sample takes one read of CPU cpu's APIC and says whether to wake the CPU
// now, and for which vector.
func (l *lostInterruptWatch) sample(cpu int, st lapicState) (int, bool) {
	if l.vec == nil {
		l.vec, l.count, l.init = map[int]int{}, map[int]int{}, map[int]uint64{}
	}
	v := st.Deliverable()
	if v >= 0 && st.HaveTimer && v == st.TimerVec {
		switch {
		case st.timerCountsDown(v):
			// Counting down again: L1 took the last expiry and set the
			// next; this one is simply due.
			l.rearmed++
			v = -1
		case l.count[cpu] > 0 && l.vec[cpu] == v && st.TimerInitial != l.init[cpu]:
			// Programmed again between the reads: a new expiry, a new count.
			l.rearmed++
			l.count[cpu] = 0
		}
	}
	if v >= 0 && l.count[cpu] == 0 {
		l.init[cpu] = st.TimerInitial
	}
	if v < 0 || v != l.vec[cpu] {
		l.vec[cpu], l.count[cpu] = v, 0
		if v < 0 {
			return -1, false
		}
	}
	l.count[cpu]++
	if l.count[cpu] < l.need {
		return v, false
	}
	l.count[cpu] = 0 // a new count after the wake
	return v, true
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

// cpuSummary is one line from `info registers` of one CPU: HLT, RIP and
// RFLAGS (IF is bit 9).
func cpuSummary(regs string) string {
	var parts []string
	for _, f := range strings.Fields(regs) {
		for _, key := range []string{"RIP=", "RFL=", "HLT="} {
			if strings.HasPrefix(f, key) {
				parts = append(parts, f)
			}
		}
	}
	if len(parts) == 0 {
		return "no registers"
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
	h, err := dialHMP(sock, 2*time.Second)
	if err != nil {
		return "no monitor: " + err.Error()
	}
	defer h.Close()
	var b strings.Builder
	for _, c := range cmds {
		ans, err := h.do(c, 5*time.Second)
		if err != nil {
			return b.String() + "monitor: " + err.Error()
		}
		b.WriteString(hmpPrompt + c + "\n" + ans)
	}
	return b.String()
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

// MarkParam on L1's command line has l1init print each line of a step
// after OutMarker (test/nested/l1init).
const (
	MarkParam = "l1init.mark=1"
	OutMarker = "NESTED-OUT "
)

// scanConsole copies the console to out and picks up l1init's markers,
// calling alive for each line. When steps is not nil, it also gets the
// lines the steps printed (l1init's OutMarker lines, the marker taken
// off, as in out). It returns the last lines for error messages and how
// the run ended.
func scanConsole(r io.Reader, out, steps io.Writer, start time.Time, alive func()) (Result, string, ending) {
	var res Result
	var last []string
	end := endNone
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		alive()
		line := strings.TrimRight(sc.Text(), "\r")
		stepLine, isStep := strings.CutPrefix(line, OutMarker)
		if isStep {
			line = stepLine
		}
		fmt.Fprintln(out, line)
		if last = append(last, line); len(last) > 20 {
			last = last[1:]
		}
		if isStep {
			if steps != nil {
				fmt.Fprintln(steps, line)
			}
			continue // a step's line is never one of l1init's markers
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
// it can): no QEMU (qemu, QEMUBinary when empty), no L1 kernel at kernel,
// or a kernel whose kernel.config (written next to it by make guest) shows
// no KVM_AMD.
func Missing(qemu, kernel string) string {
	if qemu == "" {
		qemu = QEMUBinary
	}
	if _, err := exec.LookPath(qemu); err != nil {
		return qemu + " not found: apt-get install qemu-system-x86"
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
