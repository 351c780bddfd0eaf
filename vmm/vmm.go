package vmm

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"tinyvmm/boot"
	"tinyvmm/devices"
	"tinyvmm/internal/sysmon"
	"tinyvmm/kvm"
	"tinyvmm/virtionet"
)

// machine is one running VM and everything it owns.
type machine struct {
	cfg     Config
	host    kvm.Host
	log     io.Writer
	started time.Time

	ram  *guestRAM
	sys  *kvm.System
	vm   *kvm.VM
	cpus []*kvm.VCPU
	hv   *hypervisor

	pio, mmio *devices.Bus
	serial    *devices.Serial
	serialIRQ *lineInterrupt
	console   *firstOutputWriter
	panics    *panicWatcher
	input     *cancellableReader
	netCfgs   []virtionet.Config // each --net's, normalized
	userNets  []userNet          // the --net user processes, in order
	nets      []*netDevice
	shares    []*shareDevice

	stop  *StopOnce
	exits exitCounts
	boot  bootClock

	// teardown runs in reverse order of registration.
	teardown []func()
}

func (m *machine) onTeardown(f func()) { m.teardown = append(m.teardown, f) }

func (m *machine) close() {
	for i := len(m.teardown) - 1; i >= 0; i-- {
		m.teardown[i]()
	}
	m.teardown = nil
}

func (m *machine) logf(format string, args ...any) {
	fmt.Fprintf(m.log, "tinyvmm: "+format+"\n", args...)
}

// testHookLoaded, set only by tests, runs in Run once the kernel and
// initrd are in guest RAM and their files closed, before any vCPU exists.
var testHookLoaded func()

// Validate checks a Config without touching any file or /dev/kvm.
func (c Config) Validate() error { return c.check() }

// Run boots the VM described by cfg and runs it until the guest stops, a
// vCPU fails, or ctx is cancelled (SIGINT/SIGTERM in the CLI). It returns
// the status tinyvmm should exit with: the guest's, from the exit device.
// Everything it opened is closed when it returns.
func Run(ctx context.Context, cfg Config) (int, error) {
	m := &machine{cfg: cfg, started: time.Now(), log: cfg.Log, stop: NewStopOnce()}
	m.boot.step("package init to vmm.Run")
	if m.log == nil {
		m.log = io.Discard
	}
	if m.cfg.Console == nil {
		m.cfg.Console = io.Discard
	}
	if err := m.cfg.check(); err != nil {
		return 1, err
	}
	defer m.close()
	if err := m.normalizeNets(); err != nil {
		return 1, err
	}
	if err := m.launchUserNets(); err != nil {
		return 1, err
	}
	if len(m.userNets) > 0 {
		m.boot.step("launch user nets")
	}
	st, err := m.loadGuest()
	if err != nil {
		return 1, err
	}
	m.boot.step("load kernel and initrd")
	if testHookLoaded != nil {
		testHookLoaded()
	}
	if err := m.openNets(); err != nil {
		return 1, err
	}
	m.boot.step("open nets")
	if err := m.openShares(); err != nil {
		return 1, err
	}
	if err := m.openKVM(); err != nil {
		return 1, err
	}
	m.boot.step("create VM")
	if err := m.addDevices(); err != nil {
		return 1, err
	}
	m.boot.step("devices")
	if err := m.createVCPUs(st); err != nil {
		return 1, err
	}
	m.boot.step("vCPUs")
	if err := m.awaitUserNets(); err != nil {
		return 1, err
	}
	if len(m.userNets) > 0 {
		m.boot.step("user nets ready")
	}
	if m.host.PVM {
		m.logf("%s", m.host)
	}
	for _, n := range m.cfg.Notices {
		m.logf("%s", n)
	}
	return m.run(ctx)
}

// loadGuest opens the kernel and initrd, maps RAM and lays the guest out,
// reading the files straight into it; they are closed when it returns. None of this needs KVM, so file
// errors come before /dev/kvm errors.
func (m *machine) loadGuest() (boot.CPUState, error) {
	kernel, closeKernel, err := openInput(m.cfg.Kernel, m.cfg.KernelData, "kernel", m.cfg.MemBytes)
	if err != nil {
		return boot.CPUState{}, err
	}
	defer closeKernel()
	initrd, closeInitrd, err := openInput(m.cfg.Initrd, m.cfg.InitrdData, "initrd", m.cfg.MemBytes)
	if err != nil {
		return boot.CPUState{}, err
	}
	defer closeInitrd()
	m.ram, err = allocRAM(m.cfg.MemBytes)
	if err != nil {
		return boot.CPUState{}, err
	}
	m.onTeardown(m.ram.free)
	m.boot.step("open files, map RAM")
	m.host = kvm.Detect()
	layout := boot.Layout{Low: m.ram.low, MemSize: m.cfg.MemBytes, CPUs: m.cfg.CPUs, Zeroed: true} // just mapped
	if m.cfg.UserStart {
		return boot.LoadUser(layout, kernel, m.cfg.Cmdline)
	}
	img := boot.Image{Kernel: kernel, Initrd: initrd, Cmdline: kernelCmdline(m.host, len(m.cfg.Nets)+len(m.cfg.Shares) > 0 || m.cfg.Root != "",
		strings.TrimSpace(m.cfg.initArgs()+" "+m.cfg.Cmdline), m.cfg.Command)}
	return boot.Load(layout, img)
}

// openKVM creates the VM with its in-kernel irqchip and PIT and gives it
// the RAM.
func (m *machine) openKVM() error {
	if !m.host.Usable {
		return fmt.Errorf("%s", m.host.Why)
	}
	sys, err := kvm.Open()
	if err != nil {
		return err
	}
	m.sys = sys
	m.onTeardown(func() { sys.Close() })
	for _, c := range []struct {
		capability int
		name       string
	}{{kvm.CapIRQChip, "in-kernel irqchip"}, {kvm.CapUserMemory, "user memory"}, {kvm.CapIoeventfd, "ioeventfd"},
		{kvm.CapIRQFD, "irqfd"}, {kvm.CapIRQRouting, "IRQ routing"}, {kvm.CapPIT2, "in-kernel PIT"}} {
		if sys.CheckExtension(c.capability) == 0 {
			return fmt.Errorf("this host's KVM lacks %s, which tinyvmm needs (use a newer kernel)", c.name)
		}
	}
	vm, err := sys.CreateVM()
	if err != nil {
		return err
	}
	m.vm = vm
	m.onTeardown(func() { vm.Close() })
	if err := vm.SetTSSAddr(tssAddr); err != nil {
		return err
	}
	if sys.CheckExtension(kvm.CapSetIdentityMapAddr) != 0 {
		if err := vm.SetIdentityMapAddr(identityMapAddr); err != nil {
			return err
		}
	}
	if err := vm.CreateIRQChip(); err != nil {
		return err
	}
	if err := vm.CreatePIT2(); err != nil {
		return err
	}
	m.hv = newHypervisor(vm)
	return m.ram.register(vm)
}

// addDevices puts the UART, the exit device, the reset port and the
// virtio devices on the buses.
func (m *machine) addDevices() error {
	m.pio, m.mmio = devices.NewPIOBus(), devices.NewMMIOBus()
	irq, err := newLineInterrupt(m.vm, devices.COM1IRQ)
	if err != nil {
		return err
	}
	m.serialIRQ = irq
	m.onTeardown(func() { irq.close(m.vm, devices.COM1IRQ) })
	m.console = &firstOutputWriter{w: m.cfg.Console}
	m.panics = &panicWatcher{w: m.console}
	m.serial = devices.NewSerial(irq, m.panics)
	m.onTeardown(m.serial.Close)
	for _, d := range []struct {
		port, size uint64
		dev        devices.BusDevice
	}{
		{devices.COM1Port, devices.SerialPorts, m.serial},
		{devices.ExitPort, 1, devices.NewExitDevice(m.stop.ExitStop)},
		{devices.I8042CommandPort, 1, devices.NewI8042(m.stop.ResetStop)},
		{BootTimerPort, 1, &m.boot},
	} {
		if err := m.pio.Register(d.port, d.size, d.dev); err != nil {
			return err
		}
	}
	return m.attachPCI()
}

// createVCPUs makes every vCPU; vCPU 0 (the BSP) gets the boot state.
func (m *machine) createVCPUs(st boot.CPUState) error {
	supported, err := m.sys.SupportedCPUID()
	if err != nil {
		return err
	}
	tscDeadline := m.sys.CheckExtension(capTSCDeadlineTimer) != 0
	for id := 0; id < m.cfg.CPUs; id++ {
		cpu, err := m.vm.CreateVCPU(id)
		if err != nil {
			return err
		}
		m.cpus = append(m.cpus, cpu)
		m.onTeardown(func() { cpu.Close() })
		var bsp *boot.CPUState
		if id == 0 {
			bsp = &st
		}
		skipped, err := setupVCPU(cpu, supported, m.cfg.CPUs, m.host.PVM, tscDeadline, bsp)
		if err != nil {
			return err
		}
		if id == 0 && len(skipped) > 0 && m.cfg.Trace != nil {
			fmt.Fprintf(m.cfg.Trace, "kvm: MSRs this KVM refused: %#x\n", skipped)
		}
	}
	if m.cfg.Stats != "" {
		m.openBootStats()
	}
	return nil
}

// openBootStats readies the boot timer's sample of KVM's counters and the
// guest RAM. A KVM without stats fds (before Linux 5.14) gives timestamps
// only.
func (m *machine) openBootStats() {
	m.boot.ram = m.ram
	m.onTeardown(m.boot.close)
	for _, cpu := range m.cpus {
		fd, err := cpu.StatsFD()
		if err != nil {
			m.boot.close()
			return
		}
		m.boot.statsFDs = append(m.boot.statsFDs, fd)
	}
}

// run starts the console input and the vCPUs, waits for the end, stops
// everything and turns the end into an exit status.
func (m *machine) run(ctx context.Context) (int, error) {
	if err := m.startInput(); err != nil {
		return 1, err
	}
	workers := 0
	for _, n := range m.nets {
		workers += n.dev.Pairs() // a worker thread per queue pair
	}
	reserveProcs(len(m.cpus) + workers + len(m.shares))
	sysmon.Slow()               // no timer interrupts of its own on the vCPUs' CPUs, nor on the workers'
	defer sysmon.ParkPoller()() // nor a thread started for each worker's wake
	failed := make(chan error, len(m.cpus))
	var wg sync.WaitGroup
	for _, cpu := range m.cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.runVCPU(cpu); err != nil {
				failed <- err
			}
		}()
	}
	var status int
	var err error
	select {
	case <-m.stop.Done():
		status, err = m.panics.explain(m.stop.Get()).Result()
	case err = <-failed:
		status = 1
	case <-ctx.Done():
		status, err = 1, fmt.Errorf("guest stopped: %w", context.Cause(ctx))
	}
	stoppedAt := time.Now()
	for _, cpu := range m.cpus {
		cpu.Interrupt()
	}
	wg.Wait()
	if m.input != nil {
		m.input.stop()
	}
	m.stopNets()
	m.stopShares()
	if m.cfg.Stats != "" {
		if serr := m.report(stoppedAt); serr != nil && err == nil {
			status, err = 1, serr
		}
	}
	return status, err
}

// startInput feeds the console input to the UART, through the escape
// filter when asked, from its own goroutine.
func (m *machine) startInput() error {
	in := m.cfg.ConsoleIn
	if in == nil {
		return nil
	}
	if f, ok := in.(interface{ Fd() uintptr }); ok {
		r, err := newCancellableReader(int(f.Fd()))
		if err != nil {
			return err
		}
		m.input = r
		in = r
	}
	done := make(chan struct{})
	m.onTeardown(func() {
		if m.input != nil {
			m.serial.Close() // an Enqueue waiting for room returns
			m.input.stop()
			<-done // the goroutine is gone before its eventfd closes
			m.input.close()
		}
	})
	esc := &escapeFilter{}
	go func() {
		defer close(done)
		buf := make([]byte, 256)
		for {
			n, err := in.Read(buf)
			data := buf[:n]
			quit := false
			if m.cfg.Escape {
				data, quit = esc.filter(data)
			}
			if len(data) > 0 && !m.serial.Enqueue(data) {
				return
			}
			if quit {
				m.logf("stopped by Ctrl-A x")
				m.stop.Stop(GuestStop{Reason: StopPowerOff, Detail: "Ctrl-A x"})
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

func (m *machine) report(stoppedAt time.Time) error {
	boot := m.boot.stats(m.started, stoppedAt)
	s := RunStats{FirstOutputMs: -1, ExitMs: millis(stoppedAt.Sub(m.started)), PVM: m.host.PVM, Exits: m.exits.snapshot(), Boot: &boot}
	if first := m.console.firstAt(); !first.IsZero() {
		s.FirstOutputMs = millis(first.Sub(m.started))
	}
	var texts []string
	for _, n := range m.nets {
		st := n.stats()
		s.Nets = append(s.Nets, st)
		texts = append(texts, fmt.Sprint(st))
	}
	for _, sh := range m.shares {
		st := sh.dev.Stats()
		s.Shares = append(s.Shares, st)
		texts = append(texts, st.String())
	}
	return s.report(m.cfg.Stats, m.log, texts)
}

// reserveProcs makes room in Go's scheduler for threads that live in
// blocking system calls: each vCPU in KVM_RUN and each device worker in
// epoll_wait holds a P while it is in there, and when one returns it needs
// a free P at once, not after sysmon takes one back from another blocked
// thread (up to 10 ms when sysmon is idle). With GOMAXPROCS at the CPU
// count, a 1-CPU host made every worker wake-up wait that long. Extra Ps
// cost nothing while their threads sleep in the kernel. A GOMAXPROCS the
// user set in the environment is left as it is.
func reserveProcs(blockedThreads int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if want := blockedThreads + 2; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}
