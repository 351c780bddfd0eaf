package e2e

import (
	"bytes"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/u-root/u-root/pkg/cpio"

	"tinyvmm/bench/kvmstat"
	"tinyvmm/kvm"
)

// Every VMM boots the same kernel and initramfs with one vCPU and 256 MiB,
// the same kernel arguments, on the same tap; the QEMUs differ in vhost only.
func TestLinuxGuestCommandLines(t *testing.T) {
	c := GuestConfig{Tinyvmm: "/t/tinyvmm", QEMU: "qemu-system-x86_64", QEMUAccel: "kvm"}
	g := lxGuest{Kernel: "/g/vmlinux", Initrd: "/g/lx.cpio"}
	tv := strings.Join(c.lxCommand(Tinyvmm, g).Args, " ")
	want := "/t/tinyvmm run --kernel /g/vmlinux --initrd /g/lx.cpio --cpus 1 --mem 256M --net tap=" + TapName +
		" --append " + lxKernelArgs + " -- /bin/tvlx bench e2e lxguest"
	if tv != want {
		t.Errorf("tinyvmm:\n got %s\nwant %s", tv, want)
	}
	vh, q := c.lxCommand(QEMUVhost, g).Args, c.lxCommand(QEMU, g).Args
	for _, w := range []string{"-kernel /g/vmlinux", "-initrd /g/lx.cpio", "-smp 1", "-m 256M", "-cpu host", "ifname=" + TapName} {
		if !strings.Contains(strings.Join(vh, " "), w) || !strings.Contains(strings.Join(q, " "), w) {
			t.Errorf("QEMU lacks %q:\n%q\n%q", w, vh, q)
		}
	}
	i := slices.Index(q, "-append")
	// The command line tinyvmm gives the same guest (vmm.kernelCmdline).
	if i < 0 || !strings.HasPrefix(q[i+1], "console=ttyS0 reboot=k panic=-1 quiet "+lxKernelArgs+" tinyvmm.cmd=") {
		t.Errorf("QEMU -append: %q", q)
	}
	if !strings.Contains(strings.Join(vh, " "), "vhost=on") || !strings.Contains(strings.Join(q, " "), "vhost=off") {
		t.Errorf("vhost: %q / %q", vh, q)
	}
	vh = slices.DeleteFunc(vh, func(s string) bool { return strings.Contains(s, "vhost=") })
	q = slices.DeleteFunc(q, func(s string) bool { return strings.Contains(s, "vhost=") })
	if !slices.Equal(vh, q) {
		t.Errorf("the QEMUs differ beyond vhost:\n%q\n%q", vh, q)
	}
}

func TestIperfArgs(t *testing.T) {
	for m, want := range map[string]string{
		"tcp_rx": "-4 -c 10.0.2.15 -p 5201 -t 3 -J",
		"tcp_tx": "-4 -c 10.0.2.15 -p 5201 -t 3 -J -R",
		"udp_rx": "-4 -c 10.0.2.15 -p 5201 -t 3 -J -u -l 64 -b 0",
		"udp_tx": "-4 -c 10.0.2.15 -p 5201 -t 3 -J -u -l 64 -b 0 -R",
	} {
		if got := strings.Join(iperfArgs(m, 3), " "); got != want {
			t.Errorf("%s: %s, want %s", m, got, want)
		}
	}
}

func TestParseIperf(t *testing.T) {
	tcp := `{"start":{},"end":{"sum_sent":{"bits_per_second":2e9},"sum_received":{"seconds":2,"bits_per_second":1.5e9}}}`
	if v, err := parseIperf([]byte(tcp), false); err != nil || v != 1500 {
		t.Errorf("tcp: %v %v, want 1500 Mbit/s", v, err)
	}
	// iperf3 3.12: UDP's one sum, from the receiver's report.
	udp := `{"end":{"sum":{"seconds":2,"packets":1000,"lost_packets":200}}}`
	if v, err := parseIperf([]byte(udp), true); err != nil || v != 400 {
		t.Errorf("udp: %v %v, want 400 pps", v, err)
	}
	udp2 := `{"end":{"sum":{"seconds":2,"packets":1000,"lost_packets":0},"sum_received":{"seconds":2,"packets":500,"lost_packets":100}}}`
	if v, err := parseIperf([]byte(udp2), true); err != nil || v != 200 {
		t.Errorf("udp with sum_received: %v %v, want 200 pps", v, err)
	}
	for _, bad := range []string{`{"error":"unable to connect"}`, `{"end":{}}`, `not json`, `{"end":{"sum":{"seconds":2,"packets":5,"lost_packets":5}}}`} {
		if _, err := parseIperf([]byte(bad), strings.Contains(bad, "packets")); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestParseNetDevAndKicks(t *testing.T) {
	dev := `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  tap0: 1234567    8901    0    0    0     0          0         0  7654321    4321    0    0    0     0       0          0
`
	rx, tx, err := parseNetDev([]byte(dev), "tap0")
	if err != nil || rx != 8901 || tx != 4321 {
		t.Errorf("tap0: rx %d tx %d %v, want 8901 4321", rx, tx, err)
	}
	if _, _, err := parseNetDev([]byte(dev), "tap1"); err == nil {
		t.Error("tap1: no error")
	}
	n, err := sumKicks("rx_queue_0_packets=9 rx_queue_0_kicks=3 tx_queue_0_kicks=40 tx_queue_0_bytes=7")
	if err != nil || n != 43 {
		t.Errorf("kicks %d %v, want 43", n, err)
	}
	if _, err := sumKicks("peer_ifindex=3"); err == nil {
		t.Error("no kick counters: no error")
	}
}

func TestRRStats(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(101-i)*time.Microsecond)
	}
	r := rrStats(lat, time.Second)
	if r.Trips != 100 || r.P50 != 50*time.Microsecond || r.P99 != 99*time.Microsecond {
		t.Errorf("%+v", r)
	}
}

func TestLXPerFrame(t *testing.T) {
	b := lxSnap{kvm: kvmstat.Counts{"exits": 100, "io_exits": 10, "irq_injections": 5}, tapRx: 10, tapTx: 20, kicks: 7,
		sw: threadSwitches{"9": {user: 10, ran: 100e6}, "20": {sys: 5, ran: 50e6, worker: true}}}
	// 30 ms on a CPU in all: 18 ms the VMM's thread, 12 ms the worker (the
	// ticks, 2 each, say 40 ms: per frame the exact time counts).
	a := lxSnap{kvm: kvmstat.Counts{"exits": 400, "io_exits": 10, "irq_injections": 55}, tapRx: 110, tapTx: 120, kicks: 27,
		sw: threadSwitches{"9": {user: 12, ran: 118e6}, "20": {sys: 7, ran: 62e6, worker: true}}}
	d := lxPerFrame(b, a, 9)
	want := map[string]float64{"frames": 200, "exits_per_frame": 1.5, "irqs_per_frame": 0.25, "kicks_per_frame": 0.1,
		"host_cpu_us_per_frame": 150, "worker_cpu_ms": 20}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("%s = %v, want %v (all %v)", k, d[k], v, d)
		}
	}
}

// The closer look: every KVM counter per frame (the ns ones in us), the
// guest kernel's counters and the host's interrupts on the vCPU's CPU.
func TestLXPerFrameDetail(t *testing.T) {
	irqs := func(loc, tlb uint64) hostIRQs {
		return hostIRQs{"LOC": {1000, loc}, "TLB": {50, tlb}}
	}
	b := lxSnap{kvm: kvmstat.Counts{"exits": 100, "io_exits": 10, "mmio_exits": 1, "halt_poll_fail_ns": 1e6, "insn_emulation": 4},
		tapRx: 10, tapTx: 20, guest: map[string]uint64{"irq_LOC": 7, "irq_virtio0-input.0": 3, "cpu_idle": 90},
		hostIRQs: irqs(500, 2), vcpuCPU: 1}
	a := lxSnap{kvm: kvmstat.Counts{"exits": 400, "io_exits": 10, "mmio_exits": 21, "halt_poll_fail_ns": 5e6, "insn_emulation": 104},
		tapRx: 110, tapTx: 120, guest: map[string]uint64{"irq_LOC": 47, "irq_virtio0-input.0": 103, "cpu_idle": 190, "ctxt": 5},
		hostIRQs: irqs(520, 42), vcpuCPU: 1}
	d := lxPerFrame(b, a, 9)
	want := map[string]float64{"exits_per_frame": 1.5, "kvm_io_exits_per_frame": 0, "kvm_mmio_exits_per_frame": 0.1,
		"kvm_halt_poll_fail_us_per_frame": 20, "kvm_insn_emulation_per_frame": 0.5,
		"guest_irq_LOC_per_frame": 0.2, "guest_irq_virtio0-input.0_per_frame": 0.5, "guest_cpu_idle_per_frame": 0.5,
		"vcpu_cpu_irq_LOC_per_frame": 0.1, "vcpu_cpu_irq_TLB_per_frame": 0.2}
	for k, v := range want {
		if got, ok := d[k]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{"kvm_exits_per_frame", "kvm_halt_poll_fail_ns_per_frame", "guest_ctxt_per_frame"} {
		if _, ok := d[k]; ok {
			t.Errorf("%s reported: %v", k, d)
		}
	}
}

func TestGuestCounterParsing(t *testing.T) {
	interrupts := `           CPU0       CPU1
  0:         33          1   IO-APIC   2-edge      timer
  4:          5          0   IO-APIC   4-edge      ttyS0
 24:          0          0   PCI-MSI 16384-edge      virtio0-config
 25:       1234         10   PCI-MSI 16385-edge      virtio0-input.0
 26:        567          0   PCI-MSI 16386-edge      virtio0-output.0
NMI:          0          0   Non-maskable interrupts
LOC:       5678        100   Local timer interrupts
ERR:          0
`
	got := parseInterrupts([]byte(interrupts))
	want := map[string]uint64{"timer": 34, "ttyS0": 5, "virtio0-config": 0, "virtio0-input.0": 1244, "virtio0-output.0": 567,
		"NMI": 0, "LOC": 5778, "ERR": 0}
	if !maps.Equal(got, want) {
		t.Errorf("interrupts %v, want %v", got, want)
	}
	stat := "cpu  10 1 20 300 4 5 6 7 0 0\ncpu0 10 1 20 300 4 5 6 7 0 0\nintr 99 1 2\nctxt 4242\nbtime 1\n"
	st := parseProcStat([]byte(stat))
	wantSt := map[string]uint64{"cpu_user": 10, "cpu_nice": 1, "cpu_system": 20, "cpu_idle": 300, "cpu_iowait": 4,
		"cpu_irq": 5, "cpu_softirq": 6, "cpu_steal": 7, "ctxt": 4242}
	if !maps.Equal(st, wantSt) {
		t.Errorf("stat %v, want %v", st, wantSt)
	}
	line := "rx_queue_0_kicks=3 irq_LOC=9 irq_virtio0-input.0=4 cpu_idle=300 ctxt=5 tx_queue_0_bytes=7 irq_bad=x"
	if g := guestStats(line); !maps.Equal(g, map[string]uint64{"irq_LOC": 9, "irq_virtio0-input.0": 4, "cpu_idle": 300, "ctxt": 5}) {
		t.Errorf("guestStats %v", g)
	}
}

// sysinfo reads what it can of a root and leaves the rest out.
func TestSysinfo(t *testing.T) {
	root := t.TempDir()
	for path, body := range map[string]string{
		"sys/devices/system/clocksource/clocksource0/current_clocksource": "kvm-clock\n",
		"sys/class/net/eth0/device/features":                              "1101\n",
		"proc/cmdline":                                                    "console=ttyS0  quiet\n",
		"proc/cpuinfo":                                                    "processor\t: 0\nflags\t\t: fpu tsc x2apic hypervisor\nbugs\t\t:\n",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := sysinfo(root, "eth0")
	want := map[string]string{"clocksource": "kvm-clock", "features": "1101", "cmdline": "console=ttyS0 quiet",
		"cpu_flags": "fpu tsc x2apic hypervisor"}
	if !maps.Equal(got, want) {
		t.Errorf("sysinfo %v, want %v", got, want)
	}
}

// The guest's initramfs is the default one followed by an archive with
// iperf3, its libraries and the helper.
func TestLinuxGuestInitramfs(t *testing.T) {
	if lxHere() != "" {
		t.Skip(lxHere())
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "base.cpio")
	var b bytes.Buffer
	w := cpio.Newc.Writer(&b)
	if err := cpio.WriteRecords(w, []cpio.Record{cpio.StaticFile("init", "#!/bin/sh\n", 0o755)}); err != nil {
		t.Fatal(err)
	}
	if err := cpio.WriteTrailer(w); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := lxInitramfs(dir, base, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, b.Bytes()) {
		t.Fatal("the base archive is not first")
	}
	names := map[string]bool{}
	rd := cpio.Newc.Reader(bytes.NewReader(data[len(b.Bytes()):]))
	for {
		rec, err := rd.ReadRecord()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[rec.Name] = true
	}
	iperf, _ := exec.LookPath("iperf3")
	libs := []string{"bin/tvlx", strings.TrimPrefix(iperf, "/")}
	for _, l := range []string{"libiperf.so.0", "libc.so.6"} {
		found := false
		for n := range names {
			found = found || strings.HasSuffix(n, "/"+l)
		}
		if !found {
			t.Errorf("no %s in the added archive: %v", l, names)
		}
	}
	for _, n := range libs {
		if !names[n] {
			t.Errorf("no %s in the added archive: %v", n, names)
		}
	}
}

// The guest side and the harness's clients, on one machine: the guest's
// address on a veth in a namespace of the test's own. iperf3 both ways,
// TCP and UDP, the request/response loop, the driver's counters and quit.
func TestLinuxGuestSideAnswersTheHarness(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if lxHere() != "" {
		t.Skip(lxHere())
	}
	ns, err := NewNamespace()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := ns.AddVeth("lxa", "lxb"); err != nil {
		t.Fatal(err)
	}
	if err := ns.AddAddr("lxa", LinuxGuestIP+"/32"); err != nil {
		t.Fatal(err)
	}
	defer func(v string) { lxIfname = v }(lxIfname)
	lxIfname = "lxa"
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ns.Do(func() error { return MainLXGuest(nil, pw) })
		pw.Close()
	}()
	var console bytes.Buffer
	lines := make(chan string, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := pr.Read(buf)
			console.Write(buf[:n]) // only this goroutine writes
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l != "" {
					lines <- l
				}
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	select {
	case l := <-lines:
		if !strings.HasPrefix(l, "BENCH ready") {
			t.Fatalf("first line %q", l)
		}
	case err := <-done:
		t.Fatalf("guest side ended: %v", err)
	case <-time.After(40 * time.Second):
		t.Fatal("no ready line")
	}
	for _, m := range []string{"tcp_rx", "tcp_tx", "udp_rx", "udp_tx"} {
		v, err := iperf(ns, m, 1)
		if err != nil || v <= 0 {
			t.Errorf("%s: %v %v", m, v, err)
		}
		t.Logf("%s: %.0f", m, v)
	}
	rr, err := requestResponse(ns, 300*time.Millisecond)
	if err != nil || rr.Trips == 0 || rr.P99 < rr.P50 {
		t.Errorf("request/response: %+v %v", rr, err)
	}
	st, err := lxControlCmd(ns, "stats")
	if err != nil || !strings.Contains(st, "=") {
		t.Errorf("stats: %q %v", st, err)
	}
	if g := guestStats(st); g["irq_LOC"] == 0 && g["ctxt"] == 0 {
		t.Errorf("stats without the kernel's counters: %q", st)
	}
	if info := lxSysinfo(ns); info["cmdline"] == "" || info["error"] != "" {
		t.Errorf("sysinfo: %v", info)
	}
	if _, err := lxControlCmd(ns, "bogus"); err == nil {
		t.Error("an unknown command: no error")
	}
	if _, err := lxControlCmd(ns, "quit"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the guest side did not end at quit")
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if !slices.Contains(rest, "BENCH result mode=linux ok=1") || !slices.Contains(rest, "BENCH exit status=0") {
		t.Errorf("after quit: %q", rest)
	}
}

// TestLinuxGuestUnderVMMs boots the Linux guest under each VMM that runs
// here on KVM (the nested L1: tinyvmm, QEMU+vhost, QEMU) and checks every
// measurement and its counters.
func TestLinuxGuestUnderVMMs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and taps")
	}
	if why := lxHere(); why != "" {
		t.Skip(why)
	}
	root := repoRoot(t)
	cfg := GuestConfig{ELF: filepath.Join(root, "out/guest/bench.elf"), Tinyvmm: filepath.Join(root, "bin/tinyvmm"), QEMU: "qemu-system-x86_64", QEMUAccel: "kvm"}
	for _, f := range []string{"out/guest/vmlinux", "out/guest/initramfs.cpio"} {
		if fileMissing(filepath.Join(root, f)) {
			t.Skipf("no %s: make guest", f)
		}
	}
	var systems []System
	if h := kvm.Detect(); h.Usable && !h.PVM && !fileMissing(cfg.Tinyvmm) {
		systems = append(systems, SysTinyvmm)
	}
	if _, err := exec.LookPath(cfg.QEMU); err == nil && qemuAccel(kvm.Detect()) == "kvm" {
		if !fileMissing(vhostNet) {
			systems = append(systems, SysQEMUVhost)
		}
		systems = append(systems, SysQEMU)
	}
	if len(systems) == 0 {
		t.Skip("no VMM on hardware KVM here (the nested L1 has them)")
	}
	r := testRunner(t, cfg)
	defer r.cleanup()
	if r.lxHelper = filepath.Join(root, "bin/tinyvmm-lab"); fileMissing(r.lxHelper) {
		t.Skip("no bin/tinyvmm-lab (make build): the guest's side of the linux cell")
	}
	for _, sys := range systems {
		t.Run(string(sys), func(t *testing.T) {
			s := r.linux(sys, nil)
			if s.Err != "" {
				t.Fatal(s.Err)
			}
			d := s.Detail
			for _, k := range []string{"tcp_rx_mbps", "tcp_tx_mbps", "udp_rx_pps", "udp_tx_pps", "rr_tps", "rr_p50_us", "rr_p99_us"} {
				if d[k] <= 0 {
					t.Errorf("%s = %v", k, d[k])
				}
			}
			for _, m := range lxMeasures {
				// Every measurement moved frames, and a Linux guest takes
				// interrupts for them and kicks for its tx.
				if d[m+"_frames"] <= 0 || d[m+"_exits_per_frame"] <= 0 || d[m+"_irqs_per_frame"] <= 0 || d[m+"_kicks_per_frame"] <= 0 {
					t.Errorf("%s: frames %v, per frame exits %v irqs %v kicks %v", m, d[m+"_frames"], d[m+"_exits_per_frame"], d[m+"_irqs_per_frame"], d[m+"_kicks_per_frame"])
				}
			}
			if sys == SysQEMUVhost && d["vmm_workers"] < 1 {
				t.Errorf("no vhost worker found")
			}
			t.Logf("TCP rx %.0f tx %.0f Mbit/s, UDP rx %.0f tx %.0f pps, RR %.0f/s p50 %.0f p99 %.0f us; tcp_rx per frame: %.3f exits %.3f irqs %.3f kicks %.1f host us",
				d["tcp_rx_mbps"], d["tcp_tx_mbps"], d["udp_rx_pps"], d["udp_tx_pps"], d["rr_tps"], d["rr_p50_us"], d["rr_p99_us"],
				d["tcp_rx_exits_per_frame"], d["tcp_rx_irqs_per_frame"], d["tcp_rx_kicks_per_frame"], d["tcp_rx_host_cpu_us_per_frame"])
		})
	}
}

// The linux cell's details are rows of the table and of the per-frame table.
func TestTableLinuxRows(t *testing.T) {
	o := DefaultOptions()
	o.Kicks, o.Weights = nil, nil
	o.Only = []string{"linux"}
	host := kvm.Host{Usable: true}
	rep := newReport(o, host, map[System]systemState{
		SysTinyvmm: {Label: "tinyvmm", Comparable: true}, SysCeiling: {Label: "ceiling", Comparable: true},
		SysQEMUVhost: {Label: "QEMU+vhost", Comparable: true}, SysQEMU: {Label: "QEMU", Comparable: true},
	})
	exps, err := o.cells(&runner{})
	if err != nil {
		t.Fatal(err)
	}
	rep.plan(exps)
	for _, s := range []System{SysTinyvmm, SysQEMUVhost, SysQEMU} {
		v := map[System]float64{SysTinyvmm: 3000, SysQEMUVhost: 2000, SysQEMU: 1000}[s]
		rep.add(exps[0], s, Sample{Value: v, Detail: map[string]float64{"tcp_rx_mbps": v, "rr_p99_us": v / 10, "udp_tx_exits_per_frame": v / 1e4}})
	}
	rep.finish(time.Second)
	var out bytes.Buffer
	rep.printTable(&out)
	text := out.String()
	if !regexpMatch(`(?m)^\s*Linux TCP host->guest Mbit/s\s+3,000\s+-\s+2,000\s+1,000\s+-\s+1\.50\s+3\.00\s+1\.50\s+3\.00\s*$`, text) ||
		!regexpMatch(`(?m)^\s*Linux TCP_RR p99 us\s+300\s+-\s+200\s+100\s`, text) ||
		!regexpMatch(`(?m)^\s*linux udp_tx\s+0\.300\s+0\.200\s+0\.100\s`, text) {
		t.Errorf("linux rows wrong:\n%s", text)
	}
}

func TestPanicNote(t *testing.T) {
	g := &guestProc{}
	g.run.Output = []string{"iperf3 up", "[ 90.1] traps: PANIC: double fault, error_code: 0x0",
		"[ 90.1] RIP: 0010:entry_SYSCALL_64+0x0/0x40", "[ 90.1] RIP: 0033:0x7f00",
		"[ 90.2] Kernel panic - not syncing: Fatal exception in interrupt"}
	want := "[ 90.1] RIP: 0010:entry_SYSCALL_64+0x0/0x40 | [ 90.2] Kernel panic - not syncing: Fatal exception in interrupt"
	if got := g.panicNote(); got != want {
		t.Errorf("panicNote = %q, want %q", got, want)
	}
	g.run.Output = g.run.Output[:4]
	if got := g.panicNote(); got != "" {
		t.Errorf("no panic: panicNote = %q", got)
	}
}
