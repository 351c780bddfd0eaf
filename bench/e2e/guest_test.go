package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tinyvmm/internal/uring"
	"tinyvmm/kvm"
)

// These tests boot the real bench guest (out/guest/bench.elf, built by
// guest/bench/build.sh) on a tap inside a namespace of their own, run a
// 2-second tx and rx, and count frames on both sides.

func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if dir == filepath.Dir(dir) {
			t.Skip("no repository around the test (no go.mod above it): cannot find out/guest/bench.elf")
		}
	}
}

func needGuestPrereqs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and taps")
	}
	root := repoRoot(t)
	elf := filepath.Join(root, "out/guest/bench.elf")
	if _, err := os.Stat(elf); err != nil {
		t.Skip("no out/guest/bench.elf: run guest/bench/build.sh")
	}
	return elf
}

func testRunner(t *testing.T, cfg GuestConfig) *runner {
	bootMax := 60 * time.Second
	if kvm.Detect().PVM {
		bootMax = 120 * time.Second
	}
	return &runner{cfg: cfg, secs: 2, tscKHz: HostTSCkHz(), bootMax: bootMax}
}

// checkTxRx runs both directions and checks the counts on both sides.
func checkTxRx(t *testing.T, r *runner, sys System, size int) {
	tx := r.tx(sys, size, 1, nil)
	if tx.Err != "" {
		t.Fatalf("tx: %s (details %v)", tx.Err, tx.Detail)
	}
	sent, got := tx.Detail["sent"], tx.Detail["received"]
	// Every frame the device took from the guest reaches the tap; on the
	// host side only a full input backlog or the sink's own socket queue
	// may lose some, and both are counted.
	explained := tx.Detail["sink_drops"] + tx.Detail["kernel_drops"]
	if got+explained < sent || tx.Detail["corrupt"] != 0 || tx.Detail["reordered"] != 0 {
		t.Errorf("tx: guest sent %.0f, host got %.0f (sink drops %.0f, kernel backlog drops %.0f, corrupt %.0f, reordered %.0f)",
			sent, got, tx.Detail["sink_drops"], tx.Detail["kernel_drops"], tx.Detail["corrupt"], tx.Detail["reordered"])
	}
	t.Logf("tx %d-byte: guest sent %.0f frames, host received %.0f, %.0f pps at the host", size, sent, got, tx.Value)
	checkExits(t, r, sys, "tx", tx)

	rx := r.rx(sys, false, SendFlood, nil)
	if rx.Err != "" {
		t.Fatalf("rx: %s (details %v)", rx.Err, rx.Detail)
	}
	if rx.Detail["received"] > rx.Detail["sent"] || rx.Detail["corrupt"] != 0 {
		t.Errorf("rx: host sent %.0f, guest got %.0f, corrupt %.0f", rx.Detail["sent"], rx.Detail["received"], rx.Detail["corrupt"])
	}
	t.Logf("rx: host sent %.0f frames, guest received %.0f (%.0f pps in the guest)", rx.Detail["sent"], rx.Detail["received"], rx.Value)
	checkExits(t, r, sys, "rx", rx)
	if sys != SysCeiling && !strings.Contains(r.cmdlineExtra, "cpl3=1") {
		checkRxIRQ(t, r, sys)
	}
}

// checkRxIRQ: with irq=1 the guest halts when its ring is empty and the
// device's MSI-X interrupts wake it; every frame still arrives intact.
func checkRxIRQ(t *testing.T, r *runner, sys System) {
	t.Helper()
	s := r.rx(sys, true, SendFlood, nil)
	if s.Err != "" {
		t.Fatalf("rx irq=1: %s (details %v)", s.Err, s.Detail)
	}
	d := s.Detail
	if d["received"] > d["sent"] || d["corrupt"] != 0 {
		t.Errorf("rx irq=1: host sent %.0f, guest got %.0f, corrupt %.0f", d["sent"], d["received"], d["corrupt"])
	}
	// A guest that caught up with the flood found its ring empty, halted,
	// and was woken by the device: each such wakeup is one rx interrupt. A
	// guest that never caught up (a loaded host, or PVM running it in its
	// emulator) never halts in the counted window, and rightly takes no
	// interrupt; the halting ping below checks the wakeup path then.
	caughtUp := d["received"] >= d["sent"]
	switch {
	case caughtUp && (d["guest_irqs"] == 0 || d["guest_halts"] == 0):
		t.Errorf("rx irq=1: the guest took all %.0f frames, %.0f rx interrupts and halted %.0f times, want both > 0", d["received"], d["guest_irqs"], d["guest_halts"])
	case d["guest_halts"] == 0:
		t.Logf("rx irq=1: the guest never caught up with the flood (%.0f of %.0f frames), so it never halted", d["received"], d["sent"])
	}
	if inj, ok := d["kvm_irq_injections"]; ok && inj < d["guest_irqs"]/2 {
		// The window starts after the ready line, so a few early ones are outside it.
		t.Errorf("rx irq=1: KVM injected %.0f interrupts in the window, the guest took %.0f rx interrupts", inj, d["guest_irqs"])
	}
	t.Logf("rx irq=1: guest received %.0f frames (%.0f pps), %.0f rx interrupts, %.0f halts", d["received"], s.Value, d["guest_irqs"], d["guest_halts"])
	checkExits(t, r, sys, "rx-irq", s)
}

// checkExits: a VMM on KVM has KVM's counts of the run (kvmstats.go), and
// every notify the guest wrote was a VM exit.
func checkExits(t *testing.T, r *runner, sys System, what string, s Sample) {
	t.Helper()
	if sys == SysCeiling || sys == SysQEMU && r.cfg.QEMUAccel != "kvm" {
		return
	}
	if _, ok := s.Detail["kvm_exits"]; !ok && kvm.Detect().PVM && strings.Contains(s.Note, "kvm stats:") {
		// This PVM host mounts no debugfs, and with it mounted its KVM
		// counter files refuse to open (EPERM): a skip, where L1 must count.
		t.Run(what+"-exits", func(t *testing.T) {
			t.Skipf("host KVM is PVM and its per-VM counters cannot be read here: %s", s.Note)
		})
		return
	}
	exits, kicks := s.Detail["kvm_exits"], s.Detail["guest_kicks"]
	if _, ok := s.Detail["exits_per_frame"]; !ok || exits < kicks || exits == 0 {
		t.Errorf("%s: KVM counted %.0f exits for %.0f guest kicks (note %q, details %v)", what, exits, kicks, s.Note, s.Detail)
		return
	}
	if _, ok := s.Detail["io_uring_fds"]; !ok {
		t.Errorf("%s: the VMM's io_urings were not counted at the ready line (details %v)", what, s.Detail)
	}
	// A thread of the idle class waits for every other thread on its CPU.
	// tinyvmm puts its Go sysmon there, and the runtime's threads started
	// from sysmon inherit it; its vCPUs and workers must not stay there,
	// and QEMU, which the harness starts, has none.
	for k, n := range s.Detail {
		name, ok := strings.CutPrefix(k, "vmm_sched_idle:")
		if ok && (sys != SysTinyvmm || strings.HasPrefix(name, "vcpu") || strings.HasPrefix(name, "net-")) {
			t.Errorf("%s: %.0f thread(s) %q of the VMM in SCHED_IDLE", what, n, name)
		}
	}
	t.Logf("%s: per frame %.3f exits, %.3f kicks, %.3f irqs (KVM: %.0f exits, %.0f to user space, %.0f injected interrupts; %.0f io_urings in the VMM)",
		what, s.Detail["exits_per_frame"], s.Detail["kicks_per_frame"], s.Detail["irqs_per_frame"],
		exits, s.Detail["kvm_io_exits"]+s.Detail["kvm_mmio_exits"], s.Detail["kvm_irq_injections"], s.Detail["io_uring_fds"])
}

func qemuConfig(t *testing.T) GuestConfig {
	elf := needGuestPrereqs(t)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
	}
	accel := "tcg"
	if h := kvm.Detect(); h.Usable && !h.PVM {
		accel = "kvm"
	}
	return GuestConfig{ELF: elf, QEMU: qemu, QEMUAccel: accel}
}

// TestBenchGuestUnderQEMU runs the guest's PVH entry under QEMU (TCG here:
// there is no /dev/kvm; hardware KVM where there is).
func TestBenchGuestUnderQEMU(t *testing.T) {
	checkTxRx(t, testRunner(t, qemuConfig(t)), SysQEMU, 64)
}

// TestBenchGuestUnderQEMUVhost runs the guest under QEMU with vhost=on
// where the kernel has vhost-net (the nested L1): the kernel's worker
// moves the frames, and its CPU counts as QEMU's.
func TestBenchGuestUnderQEMUVhost(t *testing.T) {
	cfg := qemuConfig(t)
	if fileMissing(vhostNet) {
		t.Skipf("no %s: the kernel has no vhost-net", vhostNet)
	}
	r := testRunner(t, cfg)
	checkTxRx(t, r, SysQEMUVhost, 64)
	checkEcho(t, r, SysQEMUVhost)
	if cfg.QEMUAccel != "kvm" {
		return
	}
	// With the ioeventfd of KVM and the kernel's worker, no frame goes
	// through QEMU's threads: the worker must be found, and it does the work.
	// The threads are read at the result line, and QEMU, its vCPU and
	// vhost's worker end soon after it (the guest lingers for them): in
	// every run both must be counted, at 1400 B too, where the run ends
	// soonest after its last frame.
	for _, size := range []int{64, 1400, 1400} {
		s := r.tx(SysQEMUVhost, size, 1, nil)
		if s.Err != "" {
			t.Fatal(s.Err)
		}
		d := s.Detail
		if d["vmm_workers"] < 1 || d["vmm_worker_cpu_ms"] <= 0 || d["vmm_host_cpu_ms"] < d["vmm_worker_cpu_ms"] {
			t.Errorf("tx %d B under vhost: %.0f workers, their CPU %.0f ms of the VMM's %.0f ms; want a worker with CPU time, counted in the VMM's",
				size, d["vmm_workers"], d["vmm_worker_cpu_ms"], d["vmm_host_cpu_ms"])
		}
		_, vcpu := d["vmm_host_cpu_us:CPU 0/KVM"]
		if worker := d["vmm_host_cpu_us:vhost"]; !vcpu || worker <= 0 || d["vmm_host_cpu_us"] < worker {
			t.Errorf("tx %d B under vhost: the vCPU thread counted %v, vhost's worker %.0f us of the VMM's %.0f us; want both (details %v)",
				size, vcpu, worker, d["vmm_host_cpu_us"], d)
		}
	}
}

// TestBenchGuestUserEntryUnderQEMU boots through PVH with cpl3=1: the guest
// drops to CPL3 and comes in through the user-mode start that tinyvmm uses
// (IOPL 3, IF 0, user pages), where any exception is reported as an error.
func TestBenchGuestUserEntryUnderQEMU(t *testing.T) {
	r := testRunner(t, qemuConfig(t))
	r.cmdlineExtra = "cpl3=1"
	inNamespace(func(ns *Namespace) Sample {
		run, err := r.guest(ns, SysQEMU, nil, "mode=tx secs=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if run.Start["entry"] != "user" {
			t.Errorf("guest started with entry=%q, want user (start line %v)", run.Start["entry"], run.Start)
		}
		return Sample{}
	})
	checkTxRx(t, r, SysQEMU, 64)
	// irq=1 needs CPL0: at CPL3 the guest says so and exits 64.
	inNamespace(func(ns *Namespace) Sample {
		_, err := r.guest(ns, SysQEMU, nil, "mode=rx secs=1 irq=1", nil)
		if err == nil || !strings.Contains(err.Error(), "CPL0") {
			t.Errorf("irq=1 at CPL3: %v; want a refusal that names CPL0", err)
		}
		return Sample{}
	})
}

// TestBenchGuestIRQWithoutEventIdxUnderQEMU: without EVENT_IDX the irq=1
// guest turns rx interrupts on and off with the avail ring's flag.
func TestBenchGuestIRQWithoutEventIdxUnderQEMU(t *testing.T) {
	r := testRunner(t, qemuConfig(t))
	r.cmdlineExtra = "evidx=0"
	checkRxIRQ(t, r, SysQEMU)
}

// TestBenchGuestUnderTinyvmm runs the guest's user-mode entry under
// tinyvmm (`tinyvmm run --kernel ELF --bench-guest`).
func TestBenchGuestUnderTinyvmm(t *testing.T) {
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	elf := needGuestPrereqs(t)
	bin := filepath.Join(repoRoot(t), "bin/tinyvmm")
	if _, err := os.Stat(bin); err != nil {
		t.Skip("no bin/tinyvmm: run make build")
	}
	r := testRunner(t, GuestConfig{ELF: elf, Tinyvmm: bin})
	inNamespace(func(ns *Namespace) Sample {
		run, err := r.guest(ns, SysTinyvmm, nil, "mode=tx secs=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if run.Start["entry"] != "user" {
			t.Errorf("guest started with entry=%q, want user (start line %v)", run.Start["entry"], run.Start)
		}
		return Sample{}
	})
	checkTxRx(t, r, SysTinyvmm, 64)
	checkRxPktgen(t, r, SysTinyvmm)
	checkEcho(t, r, SysTinyvmm)
}

// checkRxPktgen floods the guest from the kernel's pktgen (rx64pg's
// sender), where the kernel has it (the nested L1): the guest must count
// pktgen's frames, all of them, in sequence. The tap drops what its queue
// cannot hold before pktgen numbers a frame, so nothing may be missing.
func checkRxPktgen(t *testing.T, r *runner, sys System) {
	t.Helper()
	if !pktgenHere() {
		t.Log("no pktgen in this kernel: rx from pktgen not checked")
		return
	}
	s := r.rx(sys, false, PktgenFlood, nil)
	if s.Err != "" {
		t.Fatalf("rx from pktgen: %s (details %v)", s.Err, s.Detail)
	}
	d := s.Detail
	if d["guest_pktgen_frames"] != d["received"] || d["received"] > d["sent"] || d["lost"] != 0 || d["sender_cpu_ms"] <= 0 {
		t.Errorf("rx from pktgen: pktgen sent %.0f (tap drops %.0f, its thread's CPU %.0f ms), guest got %.0f, of them pktgen's %.0f, lost %.0f",
			d["sent"], d["tap_drops"], d["sender_cpu_ms"], d["received"], d["guest_pktgen_frames"], d["lost"])
	}
	t.Logf("rx from pktgen: sent %.0f, tap drops %.0f, guest received %.0f (%.0f pps in the guest)", d["sent"], d["tap_drops"], d["received"], s.Value)
}

// TestCeiling runs the same frames through the tap with no VM.
func TestCeiling(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and taps")
	}
	checkTxRx(t, testRunner(t, GuestConfig{}), SysCeiling, 64)
}

// TestCeilingTxWritesInGroups: where the kernel has io_uring, the
// ceiling's tx hands it whole groups of frames per system call, the
// cheapest way a user-space device has, so that it bounds tinyvmm's.
func TestCeilingTxWritesInGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and taps")
	}
	ring, err := uring.New(ceilingGroup)
	if err != nil {
		t.Skipf("no io_uring here: %v", err)
	}
	ring.Close()
	tx := testRunner(t, GuestConfig{}).tx(SysCeiling, 64, 1, nil)
	if tx.Err != "" {
		t.Fatalf("tx: %s (details %v)", tx.Err, tx.Detail)
	}
	if got := tx.Detail["frames_per_call"]; got <= 1 {
		t.Errorf("the ceiling wrote %.1f frames per system call; want more than 1 (groups of %d)", got, ceilingGroup)
	}
	t.Logf("%.0f pps, %.1f frames per system call", tx.Value, tx.Detail["frames_per_call"])
}

// TestBenchGuestEchoUnderQEMU pings the guest's echo mode, idle and while
// it floods tx (experiment 002's setup, tx weight vs latency): ARP and ICMP answers from the guest.
func TestBenchGuestEchoUnderQEMU(t *testing.T) {
	checkEcho(t, testRunner(t, qemuConfig(t)), SysQEMU)
}

func checkEcho(t *testing.T, r *runner, sys System) {
	for _, pm := range []pingMode{pingIdle, pingFlood} {
		flood := pm == pingFlood
		s := r.ping(sys, pm, nil)
		if s.Err != "" {
			t.Fatalf("flood=%v: %s", flood, s.Err)
		}
		d := s.Detail
		if d["lost"] > d["sent"]/10 {
			t.Errorf("flood=%v: %.0f of %.0f pings lost", flood, d["lost"], d["sent"])
		}
		if flood && d["tx_pps"] == 0 {
			t.Errorf("echo+tx sent no flood frames")
		}
		t.Logf("flood=%v: %.0f pings, rtt min/avg/p99/max %.0f/%.0f/%.0f/%.0f us, guest tx %.0f pps",
			flood, d["sent"], d["min_us"], d["avg_us"], d["p99_us"], d["max_us"], d["tx_pps"])
	}
	if sys == SysCeiling {
		return
	}
	// irq=1: the guest halts between pings, so each request (10 ms apart)
	// is an rx interrupt that wakes it.
	s := r.ping(sys, pingIdleIRQ, nil)
	if s.Err != "" {
		t.Fatalf("irq=1: %s", s.Err)
	}
	d := s.Detail
	answered := d["sent"] - d["lost"]
	if d["lost"] > d["sent"]/10 || d["guest_irqs"] < answered/2 || d["guest_halts"] == 0 {
		t.Errorf("irq=1: %.0f of %.0f pings answered, with %.0f rx interrupts and %.0f halts; want 90%% answered, an interrupt for at least every other",
			answered, d["sent"], d["guest_irqs"], d["guest_halts"])
	}
	t.Logf("irq=1: %.0f pings, rtt min/avg/p99/max %.0f/%.0f/%.0f/%.0f us, %.0f rx interrupts, %.0f halts",
		d["sent"], d["min_us"], d["avg_us"], d["p99_us"], d["max_us"], d["guest_irqs"], d["guest_halts"])
}

// TestBenchGuestAssignsBARsUnderQEMU zeroes the device's BARs first
// (bars=reassign), as if no firmware had run: the guest must place them in
// the 0xC0000000 window itself and still move frames.
func TestBenchGuestAssignsBARsUnderQEMU(t *testing.T) {
	r := testRunner(t, qemuConfig(t))
	r.cmdlineExtra = "bars=reassign"
	s := r.tx(SysQEMU, 64, 1, nil)
	if s.Err != "" {
		t.Fatalf("tx after reassigning BARs: %s", s.Err)
	}
	inNamespace(func(ns *Namespace) Sample {
		run, err := r.guest(ns, SysQEMU, nil, "mode=tx secs=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(run.Output, func(l string) bool { return strings.HasPrefix(l, "BENCH note assigned") }) {
			t.Errorf("the guest did not report assigning a BAR: %q", run.Output)
		}
		return Sample{}
	})
}

// A variant's net:KEY=VALUE flags go into tinyvmm's one --net spec; the
// rest stay flags of their own.
func TestTinyvmmVariantNetOptions(t *testing.T) {
	c := GuestConfig{ELF: "g.elf", Tinyvmm: "tinyvmm", TinyvmmArgs: []string{"--poll-us=0", "net:io=writev", "net:queues=1"}}
	got := strings.Join(c.command(Tinyvmm, "mode=tx").Args[1:], " ")
	want := "run --kernel g.elf --bench-guest --append mode=tx --net tap=" + TapName + ",io=writev,queues=1 --mem 256M --poll-us=0"
	if got != want {
		t.Errorf("command:\n got %s\nwant %s", got, want)
	}
	// A guest that takes interrupts needs CPL0: the PVH entry, not the user-mode start.
	got = strings.Join(c.command(Tinyvmm, "mode=rx irq=1").Args[1:], " ")
	want = "run --kernel g.elf --append mode=rx irq=1 --net tap=" + TapName + ",io=writev,queues=1 --mem 256M --poll-us=0"
	if got != want {
		t.Errorf("command with irq=1:\n got %s\nwant %s", got, want)
	}
}

// A variant's bin:PATH runs another tinyvmm build, for the bench guest and
// the Linux guest alike, and is no flag of tinyvmm's.
func TestTinyvmmVariantBinary(t *testing.T) {
	c := GuestConfig{ELF: "g.elf", Tinyvmm: "tinyvmm", TinyvmmArgs: []string{"bin:/tmp/tinyvmm-old", "--poll-us=0"}}
	cmd := c.command(Tinyvmm, "mode=tx")
	if cmd.Path != "/tmp/tinyvmm-old" || slices.ContainsFunc(cmd.Args, func(a string) bool { return strings.Contains(a, "bin:") }) {
		t.Errorf("command %s %q, want /tmp/tinyvmm-old without bin:", cmd.Path, cmd.Args)
	}
	if lx := c.lxCommand(Tinyvmm, lxGuest{Kernel: "k", Initrd: "i"}); lx.Path != "/tmp/tinyvmm-old" {
		t.Errorf("Linux guest's command runs %s, want /tmp/tinyvmm-old", lx.Path)
	}
	c.TinyvmmArgs = []string{"--poll-us=0"}
	if cmd := c.command(Tinyvmm, "mode=tx"); cmd.Args[0] != "tinyvmm" {
		t.Errorf("without bin: the command runs %s, want tinyvmm", cmd.Args[0])
	}
}
