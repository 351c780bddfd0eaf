package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"tinyvmm/bench/kvmstat"
	"tinyvmm/internal/syncbuf"
)

// VMM names a way to run the bench guest.
type VMM string

const (
	Tinyvmm VMM = "tinyvmm"
	QEMU    VMM = "qemu" // QEMU's own virtio-net in user space (vhost=off)
	// QEMUVhost is QEMU with vhost=on: the datapath in the kernel's
	// vhost-net, as a user who wants network speed runs QEMU.
	QEMUVhost VMM = "qemu-vhost"
)

// GuestConfig says where the pieces are and how QEMU runs.
type GuestConfig struct {
	ELF     string // out/guest/bench.elf
	Tinyvmm string // bin/tinyvmm
	QEMU    string // qemu-system-x86_64
	// QEMUAccel is "kvm" or "tcg".
	QEMUAccel string
	// TinyvmmArgs are extra flags for `tinyvmm run` (e.g. --tx-weight-pkts);
	// one written net:KEY=VALUE adds KEY=VALUE to the NIC's --net (like
	// net:io=writev).
	TinyvmmArgs []string
	// QEMUMachine is QEMU's -M; DefaultQEMUMachine when empty.
	QEMUMachine string
	// QEMUPreload, when set, is LD_PRELOADed into QEMU (the nested L1's
	// no-io-uring.so, test/nested/nouring).
	QEMUPreload string
}

// command builds the VMM command line that boots the bench guest with
// cmdline on the tap of the namespace it will start in. For tinyvmm this is the user-mode start
// (`run --kernel ELF --bench-guest`, the flag agreed with the boot work),
// except for a guest that takes interrupts (irq=1): that needs CPL0, so
// tinyvmm enters the ELF's PVH entry, as QEMU always does.
func (c GuestConfig) command(vmm VMM, cmdline string) *exec.Cmd {
	switch vmm {
	case Tinyvmm:
		net, extra := c.tinyvmmNet()
		args := []string{"run", "--kernel", c.ELF}
		if !slices.Contains(strings.Fields(cmdline), "irq=1") {
			args = append(args, "--bench-guest")
		}
		args = append(args, "--append", cmdline, "--net", net, "--mem", "256M")
		return exec.Command(c.tinyvmmBin(), append(args, extra...)...)
	default:
		machine := c.QEMUMachine
		if machine == "" {
			machine = DefaultQEMUMachine
		}
		// vhost=on: QEMU fails to start where /dev/vhost-net cannot be
		// opened, rather than falling back to its user-space device.
		vhost := "vhost=off"
		if vmm == QEMUVhost {
			vhost = "vhost=on"
		}
		// debug-threads: QEMU names its threads (vCPUs "CPU 0/KVM"), as
		// tinyvmm does, so top -H and NESTED_PERF's report tell them apart.
		cmd := exec.Command(c.QEMU, "-name", "bench,debug-threads=on", "-accel", c.QEMUAccel, "-M", machine, "-m", "256M",
			"-nodefaults", "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot",
			"-kernel", c.ELF, "-append", cmdline,
			"-netdev", "tap,id=n0,ifname="+TapName+",script=no,downscript=no,"+vhost,
			"-device", "virtio-net-pci,netdev=n0,disable-legacy=on",
			"-device", "isa-debug-exit,iobase=0x501,iosize=1")
		if c.QEMUPreload != "" {
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+c.QEMUPreload)
		}
		return cmd
	}
}

// tinyvmmNet is tinyvmm's --net for the bench's tap with TinyvmmArgs'
// net:KEY=VALUE options, and the rest of TinyvmmArgs but bin:PATH.
func (c GuestConfig) tinyvmmNet() (net string, extra []string) {
	net = "tap=" + TapName
	for _, a := range c.TinyvmmArgs {
		if opt, ok := strings.CutPrefix(a, "net:"); ok {
			net += "," + opt
		} else if !strings.HasPrefix(a, "bin:") {
			extra = append(extra, a)
		}
	}
	return net, extra
}

// tinyvmmBin is the tinyvmm binary to run: TinyvmmArgs' bin:PATH (a
// variant that is another build, for an A/B of two builds interleaved in
// one invocation), else Tinyvmm.
func (c GuestConfig) tinyvmmBin() string {
	bin := c.Tinyvmm
	for _, a := range c.TinyvmmArgs {
		if p, ok := strings.CutPrefix(a, "bin:"); ok {
			bin = p
		}
	}
	return bin
}

// DefaultQEMUMachine is the bench's QEMU machine: q35 without the i8254
// PIT. SeaBIOS starts the PIT's 18.2 Hz tick and the bench guest then runs
// with interrupts off, so under QEMU (and not under tinyvmm, whose guest
// starts without firmware) an IRQ 0 would stay pending for the whole run:
// KVM keeps an interrupt window open for it, and in the nested L1 that
// pending-interrupt path of TCG's emulated SVM is where L1 froze (see
// test/nested/README.md and bench/HISTORY.md). Without it both VMMs' guests
// have no interrupt source.
const DefaultQEMUMachine = "q35,pit=off"

// GuestRun is one run of the bench guest as its serial output told it.
type GuestRun struct {
	Start  map[string]string // the BENCH start line (entry=user or pvh)
	Ready  map[string]string // the BENCH ready line
	Result map[string]string // the BENCH result line
	Error  string            // a BENCH error line
	Status int               // the guest's exit status, -1 if it wrote none
	Output []string          // the last lines of output, for failures
	// KVM is what KVM counted for the VM from the end of the ready line
	// to the start of the result line (the timed window, give or take a
	// pipe wakeup); nil with KVMErr saying why when it could not be read.
	KVM    kvmstat.Counts
	KVMErr string
	// IOURings is how many io_urings the VMM held once its guest was
	// running (-1: unknown).
	IOURings int
	// HostIRQs are the host's interrupts in the same window on the CPU
	// its vCPU ran on (hostirqs.go), nil when unknown.
	HostIRQs map[string]uint64
	// Switches are the VMM's threads' sleeps and preemptions in the window
	// (threadSwitches.since), nil when unknown.
	Switches map[string]uint64
	// Workers is how many kernel vhost workers served the VMM (counted
	// with its threads in Switches).
	Workers int
}

// Uint reads a number from the result line (0 when absent).
func (r *GuestRun) Uint(key string) uint64 {
	v, _ := strconv.ParseUint(r.Result[key], 10, 64)
	return v
}

// guestProc is a running VMM with the bench guest.
type guestProc struct {
	vmm   VMM
	cmd   *exec.Cmd
	ready chan struct{}
	done  chan error
	mu    sync.Mutex
	run   GuestRun
	errb  syncbuf.Buffer
	// stats and before are touched only by the goroutine that scans the
	// output.
	stats  *kvmstat.VM
	before kvmstat.Counts
	// workers are the kernel's vhost workers serving the VMM (vhost.go),
	// found at the ready line: they count as its threads.
	workers   []int
	irqBefore hostIRQs
	swBefore  threadSwitches
	// pin, when set, moves the vCPU onto its own CPU at the ready line;
	// pinErr says why it could not (the run then fails).
	pin    *pinning
	pinErr error
}

// keepLines is how much of a guest's console a run keeps: enough for a
// Linux guest's oops and its call trace.
const keepLines = 100

func startGuest(ns *Namespace, cfg GuestConfig, vmm VMM, cmdline string, pin *pinning) (*guestProc, error) {
	return startVMM(ns, cfg.command(vmm, cmdline), vmm, pin)
}

// startVMM starts cmd, a VMM whose guest prints BENCH lines, in ns.
func startVMM(ns *Namespace, cmd *exec.Cmd, vmm VMM, pin *pinning) (*guestProc, error) {
	g := &guestProc{vmm: vmm, cmd: cmd, ready: make(chan struct{}), done: make(chan error, 1), pin: pin}
	g.run.Status, g.run.IOURings = -1, -1
	out, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	g.cmd.Stderr = &g.errb
	if err := ns.Start(g.cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", vmm, err)
	}
	go func() {
		// The window closes as the result line starts, before the
		// guest's serial output of it (an exit or two per byte).
		g.scan(&markReader{r: out, marker: []byte("BENCH result"), at: g.statsAfter})
		g.mu.Lock()
		if g.stats != nil {
			g.stats.Close()
		}
		g.mu.Unlock()
		g.done <- g.cmd.Wait()
	}()
	return g, nil
}

func (g *guestProc) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, "BENCH "); i >= 0 {
			line = line[i:]
		}
		if g.stats == nil && g.run.KVMErr == "" {
			g.openStats() // the guest runs, so the vCPUs exist
		}
		if strings.HasPrefix(line, "BENCH ready") {
			// The device is running, so its vhost workers exist.
			g.workers, _ = vhostWorkers("/proc", g.cmd.Process.Pid)
		}
		if g.pin != nil && strings.HasPrefix(line, "BENCH ready") {
			// Before the window opens; the guest is already at work.
			if err := g.pin.pinVCPU(g.cmd.Process.Pid); err != nil {
				g.pinErr = fmt.Errorf("pin the vCPU: %w", err)
			} else if err := g.pin.placeWorkers(g.workers); err != nil {
				g.pinErr = fmt.Errorf("place the vhost workers: %w", err)
			}
		}
		g.mu.Lock()
		g.run.Output = append(g.run.Output, line)
		if len(g.run.Output) > keepLines {
			g.run.Output = g.run.Output[1:]
		}
		switch {
		case strings.HasPrefix(line, "BENCH start"):
			g.run.Start = parseKV(line)
		case strings.HasPrefix(line, "BENCH ready"):
			g.run.Ready = parseKV(line)
			g.statsBefore()
			close(g.ready)
		case strings.HasPrefix(line, "BENCH result"):
			g.run.Result = parseKV(line)
		case strings.HasPrefix(line, "BENCH error"):
			g.run.Error = strings.TrimPrefix(line, "BENCH error ")
		case strings.HasPrefix(line, "BENCH exit"):
			g.run.Status, _ = strconv.Atoi(parseKV(line)["status"])
		}
		g.mu.Unlock()
	}
}

// openStats finds the VMM's VM in debugfs (kvmstats.go).
func (g *guestProc) openStats() {
	s, err := kvmstat.Open(kvmstat.DebugFS, "/proc", g.cmd.Process.Pid)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.run.KVMErr = err.Error()
		return
	}
	g.stats = s
}

// statsBefore snapshots the counters at the ready line (g.mu held), and
// counts the VMM's io_urings: its device runs by then, so a ring its
// worker makes when the driver is ready counts too.
func (g *guestProc) statsBefore() {
	if g.stats == nil {
		return
	}
	if fds, err := kvmstat.ScanFDs(fmt.Sprintf("/proc/%d/fd", g.cmd.Process.Pid)); err == nil {
		g.run.IOURings = fds.IOURings
	}
	c, err := g.stats.Read()
	if err != nil {
		g.run.KVMErr = err.Error()
		return
	}
	g.before = c
	g.irqBefore, _ = readHostIRQs("/proc/interrupts") // only details: nil skips them
	g.swBefore, _ = readThreadSwitches("/proc", g.cmd.Process.Pid, g.workers...)
}

// statsAfter snapshots the counters as the result line starts and keeps
// the difference from the ready line's snapshot.
func (g *guestProc) statsAfter() {
	if g.stats == nil || g.before == nil {
		return
	}
	c, err := g.stats.Read()
	if err == nil {
		c, err = c.Sub(g.before)
	}
	var irqs, sw map[string]uint64
	if now, serr := readThreadSwitches("/proc", g.cmd.Process.Pid, g.workers...); serr == nil && g.swBefore != nil {
		sw = now.since(g.swBefore, g.cmd.Process.Pid)
	}
	if now, ierr := readHostIRQs("/proc/interrupts"); ierr == nil && g.irqBefore != nil {
		if _, cpu, cerr := vcpuThread("/proc", g.cmd.Process.Pid); cerr == nil && cpu >= 0 {
			irqs = now.onCPU(g.irqBefore, cpu)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.run.KVMErr = err.Error()
		return
	}
	g.run.KVM, g.run.HostIRQs, g.run.Switches, g.run.Workers = c, irqs, sw, len(g.workers)
}

// markReader passes r through and calls at, once, as soon as marker has
// gone by (also when a read splits it).
type markReader struct {
	r      io.Reader
	marker []byte
	at     func()
	tail   []byte // the last len(marker)-1 bytes seen
	done   bool
}

func (m *markReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if m.done || n == 0 {
		return n, err
	}
	seen := append(m.tail, p[:n]...)
	if bytes.Contains(seen, m.marker) {
		m.done = true
		m.at()
		return n, err
	}
	if keep := len(m.marker) - 1; len(seen) > keep {
		seen = seen[len(seen)-keep:]
	}
	m.tail = append(m.tail[:0], seen...)
	return n, err
}

func parseKV(line string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			m[k] = v
		}
	}
	return m
}

// waitReady waits for the guest's ready line (its boot is over).
func (g *guestProc) waitReady(timeout time.Duration) (map[string]string, error) {
	select {
	case <-g.ready:
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.pinErr != nil {
			return nil, g.pinErr
		}
		return g.run.Ready, nil
	case err := <-g.done:
		g.done <- err
		return nil, g.failure("exited before it was ready")
	case <-time.After(timeout):
		return nil, g.failure(fmt.Sprintf("not ready after %v", timeout))
	}
}

// wait waits for the VMM to end, killing it (by its PID) after timeout,
// and checks that the guest reported a result and exit status 0.
func (g *guestProc) wait(timeout time.Duration) (*GuestRun, error) {
	select {
	case <-g.done:
	case <-time.After(timeout):
		_ = g.cmd.Process.Kill()
		<-g.done
		return g.snapshot(), g.failure(fmt.Sprintf("still running after %v (killed)", timeout))
	}
	r := g.snapshot()
	if v, ok := g.exceptionVector(r); ok {
		return r, g.failure(fmt.Sprintf("guest took exception vector %d at CPL3 (it left native mode)", v))
	}
	switch {
	case r.Error != "":
		return r, g.failure("guest error " + r.Error)
	case r.Status != 0 || r.Result == nil:
		return r, g.failure(fmt.Sprintf("guest exit status %d", r.Status))
	}
	if code := g.cmd.ProcessState.ExitCode(); !g.exitCodeOK(code) {
		return r, g.failure(fmt.Sprintf("%s exit code %d", g.vmm, code))
	}
	return r, nil
}

// exceptionVector recognizes tinyvmm's user-mode exception stubs: they
// write the vector (0..31) to the exit device without a BENCH exit line.
func (g *guestProc) exceptionVector(r *GuestRun) (int, bool) {
	code := g.cmd.ProcessState.ExitCode()
	if g.vmm != Tinyvmm || r.Status >= 0 || code < 0 || code > 31 {
		return 0, false
	}
	return code, true
}

// exitCodeOK: tinyvmm exits with the guest's status; QEMU's isa-debug-exit
// turns status s into (s << 1) | 1.
func (g *guestProc) exitCodeOK(code int) bool {
	if g.vmm == QEMU || g.vmm == QEMUVhost {
		return code == 1
	}
	return code == 0
}

// kill stops the VMM now, by its PID, and reaps it.
// panicNote is, when the guest's console (as far as it is kept) has its
// kernel's panic, where the oops was (its first RIP line) and the panic
// line; otherwise "".
func (g *guestProc) panicNote() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var rip string
	for _, l := range g.run.Output {
		if rip == "" && strings.Contains(l, "RIP:") {
			rip = strings.TrimSpace(l) + " | "
		}
		if strings.Contains(l, "Kernel panic") {
			return rip + strings.TrimSpace(l)
		}
	}
	return ""
}

func (g *guestProc) kill() {
	_ = g.cmd.Process.Kill()
	select {
	case err := <-g.done:
		g.done <- err
	case <-time.After(5 * time.Second):
	}
}

func (g *guestProc) snapshot() *GuestRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.run
	r.Output = append([]string(nil), g.run.Output...)
	return &r
}

func (g *guestProc) failure(what string) error {
	r := g.snapshot()
	tail := r.Output
	if len(tail) > 6 {
		tail = tail[len(tail)-6:]
	}
	msg := fmt.Sprintf("%s: %s", g.vmm, what)
	if len(tail) > 0 {
		msg += "; last output: " + strings.Join(tail, " | ")
	}
	if s := strings.TrimSpace(g.errb.String()); s != "" {
		if len(s) > 300 {
			s = s[len(s)-300:]
		}
		msg += "; stderr: " + s
	}
	return errors.New(msg)
}
