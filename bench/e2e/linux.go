package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"tinyvmm/bench/kvmstat"
	"tinyvmm/test/nested"
	"tinyvmm/vmm"
)

// The Linux-guest cells: the project's default guest kernel (out/guest/
// vmlinux, booted through its PVH entry by both VMMs) with its own
// virtio-net driver, as a user runs it, under tinyvmm, QEMU+vhost and
// QEMU alike: one vCPU, 256 MiB, the same initramfs (the default one with
// iperf3 and its libraries added, and the lab command itself as the
// guest's helper, lxguest.go), the same kernel command line, the same pinning.
// Each run boots the guest once and measures, in this order:
//
//	tcp_rx  TCP stream host->guest   iperf3 -c GUEST
//	tcp_tx  TCP stream guest->host   iperf3 -c GUEST -R
//	rr      TCP request/response, 1 byte each way (netperf TCP_RR's
//	        shape): round trips per second, p50 and p99 latency
//	udp_rx  UDP, 64-byte datagrams, host->guest, received pps   iperf3 -u -l 64 -b 0
//	udp_tx  the same guest->host                                 ... -R
//
// The UDP floods come last: in the nested L1 the guest kernel sometimes
// dies in one (a double fault at the system call entry, under every VMM
// and most often under QEMU+vhost, which injects the most interrupts per
// frame; bench/RESULTS.md), and iperf3 then waits forever for its end of
// test. A measurement that fails ends the run but keeps what came before
// it (the run's note says which failed, and that the guest panicked),
// unless it is the first.
//
// and for each, over its own window, KVM's exits and injected interrupts,
// the driver's notifies (ethtool's rx/tx_queue_N_kicks) and the VMM's
// host CPU (vhost's worker included), per frame crossing the tap.

// lxTitle is the linux cells' title.
const lxTitle = "Linux guest: iperf3 TCP/UDP, TCP request/response"

// lxMeasures are the measurements of a Linux-guest run, in order.
var lxMeasures = []string{"tcp_rx", "tcp_tx", "rr", "udp_rx", "udp_tx"}

// lxUDPSize is the UDP payload of the pps cells (iperf3 -l, netperf -m).
const lxUDPSize = 64

// LinuxGuestIP is the guest's address (the kernel's ip=; no DHCP here).
const LinuxGuestIP = "10.0.2.15"

// lxKernelArgs configure eth0 from the kernel command line.
const lxKernelArgs = "ip=" + LinuxGuestIP + "::10.0.2.1:255.255.255.0::eth0:off"

// lxGuest is the Linux guest's pieces: the kernel and the initramfs made
// for the run (lxInitramfs).
type lxGuest struct {
	Kernel, Initrd string
}

// lxHere says why the Linux-guest cells cannot run here ("" when they can):
// they need iperf3 on the host side too.
func lxHere() string {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return "no iperf3 (apt-get install iperf3)"
	}
	return ""
}

// lxInitramfs writes dir/lx.cpio: base (the default guest's initramfs)
// followed by a second archive (the kernel unpacks one after the other)
// with iperf3, the libraries it needs, and helper (the lab command, for
// `bench e2e lxguest`) as /bin/tvlx.
func lxInitramfs(dir, base, helper string) (string, error) {
	iperf, err := exec.LookPath("iperf3")
	if err != nil {
		return "", fmt.Errorf("the Linux guest needs iperf3: %w (apt-get install iperf3)", err)
	}
	files := []nested.File{{Dest: "/bin/tvlx", Src: helper, Mode: 0o755}, {Dest: "/usr/bin/iperf3", Src: iperf, Mode: 0o755}}
	for _, bin := range []string{iperf, helper} {
		libs, err := nested.SharedLibraries(bin)
		if err != nil {
			return "", fmt.Errorf("libraries of %s: %w", bin, err)
		}
		for _, l := range libs {
			if !slices.ContainsFunc(files, func(f nested.File) bool { return f.Dest == l }) {
				files = append(files, nested.File{Dest: l, Src: l, Mode: 0o755})
			}
		}
	}
	b, err := os.ReadFile(base)
	if err != nil {
		return "", fmt.Errorf("the default guest's initramfs: %w (make guest)", err)
	}
	var extra bytes.Buffer
	if err := nested.WriteInitramfs(&extra, files, nil); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "lx.cpio")
	// newc archives are padded to 4 bytes; the kernel accepts them back to back.
	return out, os.WriteFile(out, append(b, extra.Bytes()...), 0o644)
}

// lxCommand is the VMM command line that boots the Linux guest running
// the guest side (`tvlx bench e2e lxguest`).
func (c GuestConfig) lxCommand(v VMM, g lxGuest) *exec.Cmd {
	argv := []string{"/bin/tvlx", "bench", "e2e", "lxguest"}
	if v == Tinyvmm {
		net, extra := c.tinyvmmNet()
		args := append([]string{"run", "--kernel", g.Kernel, "--initrd", g.Initrd, "--cpus", "1", "--mem", "256M",
			"--net", net, "--append", lxKernelArgs}, extra...)
		return exec.Command(c.tinyvmmBin(), append(append(args, "--"), argv...)...)
	}
	vhost, cpu := "vhost=off", "host"
	if v == QEMUVhost {
		vhost = "vhost=on"
	}
	if c.QEMUAccel != "kvm" {
		cpu = "max"
	}
	// tinyvmm's own command line for a guest with a NIC and a command.
	cmdline := "console=ttyS0 reboot=k panic=-1 quiet " + lxKernelArgs + " " + vmm.CommandArg(argv)
	cmd := exec.Command(c.QEMU, "-name", "bench,debug-threads=on", "-accel", c.QEMUAccel, "-M", DefaultQEMUMachine,
		"-cpu", cpu, "-smp", "1", "-m", "256M",
		"-nodefaults", "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot",
		"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", cmdline,
		"-netdev", "tap,id=n0,ifname="+TapName+",script=no,downscript=no,"+vhost,
		"-device", "virtio-net-pci,netdev=n0,disable-legacy=on",
		"-device", "isa-debug-exit,iobase=0x501,iosize=1")
	if c.QEMUPreload != "" {
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+c.QEMUPreload)
	}
	return cmd
}

// lxSnap is what a measurement's window is counted from.
type lxSnap struct {
	kvm      kvmstat.Counts // Names and Detail
	sw       threadSwitches
	tapRx    uint64 // packets the tap received (from the guest)
	tapTx    uint64 // and sent (to the guest)
	kicks    uint64 // the guest driver's notifies, all queues
	kicksErr error
	guest    map[string]uint64 // the guest kernel's counters (guestCounters)
	hostIRQs hostIRQs          // the host's interrupts, per CPU
	vcpuCPU  int               // where the vCPU thread last ran (-1: unknown)
}

// lxSnapshot reads the counters of the Linux guest g running in ns.
func (g *guestProc) lxSnapshot(ns *Namespace) (lxSnap, error) {
	var s lxSnap
	g.mu.Lock()
	stats, kvmErr := g.stats, g.run.KVMErr
	g.mu.Unlock()
	if stats == nil {
		return s, fmt.Errorf("no KVM counters: %s", kvmErr)
	}
	var err error
	if s.kvm, err = stats.ReadDetail(); err != nil {
		return s, err
	}
	if s.sw, err = readThreadSwitches("/proc", g.cmd.Process.Pid, g.workers...); err != nil {
		return s, err
	}
	s.hostIRQs, _ = readHostIRQs("/proc/interrupts") // only details: nil skips them
	if _, s.vcpuCPU, err = vcpuThread("/proc", g.cmd.Process.Pid); err != nil {
		s.vcpuCPU = -1
	}
	if s.tapRx, s.tapTx, err = tapPackets(ns, TapName); err != nil {
		return s, err
	}
	st, err := lxControlCmd(ns, "stats")
	if err == nil {
		s.guest = guestStats(st)
		s.kicks, err = sumKicks(st)
	}
	s.kicksErr = err
	return s, nil
}

// guestStats picks the guest kernel's counters (guestCounters' irq_*,
// cpu_* and ctxt) from a stats line of NAME=VALUE words.
func guestStats(line string) map[string]uint64 {
	m := map[string]uint64{}
	for _, w := range strings.Fields(line) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !(strings.HasPrefix(k, "irq_") || strings.HasPrefix(k, "cpu_") || k == "ctxt") {
			continue
		}
		if x, err := strconv.ParseUint(v, 10, 64); err == nil {
			m[k] = x
		}
	}
	return m
}

// sumKicks adds up virtio-net's per-queue notify counts (rx_queue_N_kicks,
// tx_queue_N_kicks) from a stats line of NAME=VALUE words.
func sumKicks(line string) (uint64, error) {
	var n uint64
	found := false
	for _, w := range strings.Fields(line) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !strings.HasSuffix(k, "_kicks") {
			continue
		}
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stats %q: %v", w, err)
		}
		n += x
		found = true
	}
	if !found {
		return 0, fmt.Errorf("the driver counts no kicks: %.200s", line)
	}
	return n, nil
}

// tapPackets reads a device's received and sent packets in ns
// (/proc/net/dev of ns: the reading thread's namespace).
func tapPackets(ns *Namespace, dev string) (rx, tx uint64, err error) {
	var b []byte
	if err := ns.Do(func() (err error) { b, err = os.ReadFile("/proc/thread-self/net/dev"); return }); err != nil {
		return 0, 0, err
	}
	return parseNetDev(b, dev)
}

// parseNetDev finds dev in /proc/net/dev: after "dev:", 8 receive fields
// (bytes, packets, ...) then 8 transmit fields (bytes, packets, ...).
func parseNetDev(b []byte, dev string) (rx, tx uint64, err error) {
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != dev {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 10 {
			break
		}
		rx, err1 := strconv.ParseUint(f[1], 10, 64)
		tx, err2 := strconv.ParseUint(f[9], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("/proc/net/dev %s: %v", dev, err)
		}
		return rx, tx, nil
	}
	return 0, 0, fmt.Errorf("/proc/net/dev has no %s", dev)
}

// lxDial connects to the guest's port from inside ns.
func lxDial(ns *Namespace, port int) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(LinuxGuestIP, strconv.Itoa(port)), 10*time.Second)
		return err
	})
	return c, err
}

// lxControlCmd sends one command to the guest side's control port and
// returns its one-line answer.
func lxControlCmd(ns *Namespace, cmd string) (string, error) {
	c, err := lxDial(ns, lxControlPort)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, cmd); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return "", errors.New("guest: " + msg)
	}
	return line, nil
}

// iperfResult is what the harness reads from iperf3 -J.
type iperfResult struct {
	End struct {
		Sum         iperfSum `json:"sum"`
		SumSent     iperfSum `json:"sum_sent"`
		SumReceived iperfSum `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         float64 `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Packets       float64 `json:"packets"`
	LostPackets   float64 `json:"lost_packets"`
}

// iperfArgs are iperf3's client flags for measurement m (lxMeasures).
func iperfArgs(m string, secs int) []string {
	args := []string{"-4", "-c", LinuxGuestIP, "-p", strconv.Itoa(lxIperfPort), "-t", strconv.Itoa(secs), "-J"}
	if strings.HasPrefix(m, "udp") {
		args = append(args, "-u", "-l", strconv.Itoa(lxUDPSize), "-b", "0")
	}
	if strings.HasSuffix(m, "_tx") { // the guest sends: iperf3's reverse mode
		args = append(args, "-R")
	}
	return args
}

// parseIperf turns iperf3's JSON into the cell's value: the receiver's
// Mbit/s for TCP, its datagrams per second for UDP (sent less lost).
func parseIperf(b []byte, udp bool) (float64, error) {
	var r iperfResult
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("iperf3 -J: %v: %.200s", err, b)
	}
	if r.Error != "" {
		return 0, errors.New("iperf3: " + r.Error)
	}
	if !udp {
		s := r.End.SumReceived
		if s.BitsPerSecond <= 0 {
			return 0, fmt.Errorf("iperf3: nothing received: %.300s", b)
		}
		return s.BitsPerSecond / 1e6, nil
	}
	s := r.End.Sum
	if r.End.SumReceived.Packets > 0 { // newer iperf3 report each side
		s = r.End.SumReceived
	}
	if s.Seconds <= 0 || s.Packets <= s.LostPackets {
		return 0, fmt.Errorf("iperf3: no datagram received: %.300s", b)
	}
	return (s.Packets - s.LostPackets) / s.Seconds, nil
}

// lxIperfGrace is how long past its run iperf3 may take to end. With a
// live guest it ends well within a second of it; one that still runs has
// lost its guest.
const lxIperfGrace = 15

// iperf runs iperf3's client in ns for measurement m.
func iperf(ns *Namespace, m string, secs int) (float64, error) {
	cmd := exec.Command("iperf3", iperfArgs(m, secs)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := ns.Start(cmd); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && out.Len() == 0 {
			return 0, fmt.Errorf("iperf3 %s: %v: %s", m, err, strings.TrimSpace(errb.String()))
		}
	case <-time.After(time.Duration(secs+lxIperfGrace) * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return 0, fmt.Errorf("iperf3 %s: still running after %d s (killed)", m, secs+lxIperfGrace)
	}
	return parseIperf(out.Bytes(), strings.HasPrefix(m, "udp"))
}

// rrResult is a request/response run: round trips and their latencies.
type rrResult struct {
	Trips    int
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// requestResponse does netperf TCP_RR's loop against the guest: one
// connection, TCP_NODELAY, a request of rrSize bytes and its response of
// as many, one after another, for d.
func requestResponse(ns *Namespace, d time.Duration) (rrResult, error) {
	c, err := lxDial(ns, lxRRPort)
	if err != nil {
		return rrResult{}, err
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	buf := make([]byte, rrSize)
	var lat []time.Duration
	start := time.Now()
	c.SetDeadline(start.Add(d + 10*time.Second))
	for time.Since(start) < d {
		t := time.Now()
		if _, err := c.Write(buf); err != nil {
			return rrResult{}, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return rrResult{}, err
		}
		lat = append(lat, time.Since(t))
	}
	return rrStats(lat, time.Since(start)), nil
}

func rrStats(lat []time.Duration, elapsed time.Duration) rrResult {
	r := rrResult{Trips: len(lat), Elapsed: elapsed}
	if len(lat) == 0 {
		return r
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	r.P50 = s[(len(s)-1)*50/100]
	r.P99 = s[(len(s)-1)*99/100]
	return r
}

// lxPrepare makes the Linux guest's initramfs once per bench run, in a
// directory removed by the returned cleanup.
func (r *runner) lxPrepare() {
	r.lxOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tinyvmm-lx-")
		if err != nil {
			r.lxErr = err
			return
		}
		r.lxDir = dir
		guestDir := filepath.Dir(r.cfg.ELF)
		if r.lxHelper == "" {
			r.lxErr = errors.New("no program to run the Linux guest's side (bench e2e lxguest)")
			return
		}
		initrd, err := lxInitramfs(dir, filepath.Join(guestDir, "initramfs.cpio"), r.lxHelper)
		if err != nil {
			r.lxErr = err
			return
		}
		r.lx = &lxGuest{Kernel: filepath.Join(guestDir, "vmlinux"), Initrd: initrd}
	})
}

// cleanup removes what the runner made for the whole bench run.
func (r *runner) cleanup() {
	if r.lxDir != "" {
		os.RemoveAll(r.lxDir)
	}
}

// linux boots the Linux guest under sys (tinyvmm with vmmArgs) and runs every measurement of
// lxMeasures in that one boot (lxMeasures' doc). The headline value is
// tcp_rx; the rest is in the details.
func (r *runner) linux(sys System, vmmArgs []string) Sample {
	r.lxPrepare()
	if r.lxErr != nil {
		return failed(r.lxErr)
	}
	cfg := r.cfg
	cfg.TinyvmmArgs = vmmArgs
	return inNamespace(func(ns *Namespace) Sample {
		g, err := startVMM(ns, cfg.lxCommand(VMM(sys), *r.lx), VMM(sys), r.pin)
		if err != nil {
			return failed(err)
		}
		if _, err := g.waitReady(2 * r.bootMax); err != nil {
			g.kill()
			return failed(err)
		}
		s := Sample{Detail: map[string]float64{}, Guest: lxSysinfo(ns)}
		for i, m := range lxMeasures {
			if err := r.lxMeasure(ns, g, m, s.Detail); err != nil {
				if p := g.panicNote(); p != "" {
					err = fmt.Errorf("%w; the guest kernel panicked: %s", err, p)
				}
				g.kill()
				if i == 0 {
					return failed(fmt.Errorf("%s: %w", m, err))
				}
				s.Value = s.Detail["tcp_rx_mbps"]
				s.Note = fmt.Sprintf("%s failed, the rest not measured: %v", m, err)
				return s
			}
		}
		if _, err := lxControlCmd(ns, "quit"); err != nil {
			g.kill()
			return failed(fmt.Errorf("quit: %w", err))
		}
		run, err := g.wait(r.guestTimeout())
		if err != nil {
			return failed(err)
		}
		s.Value = s.Detail["tcp_rx_mbps"]
		s.Detail["vmm_workers"] = float64(run.Workers)
		return s
	})
}

// lxSysinfo asks the guest what it was given and chose (sysinfo) and adds
// the L1 host's halt polling parameters (l1_NAME: KVM's module
// parameters, the same for every VM unless its VMM sets its own); an
// answer that cannot be had is its error, under "error".
func lxSysinfo(ns *Namespace) map[string]string {
	m := map[string]string{}
	if line, err := lxControlCmd(ns, "sysinfo"); err != nil {
		m["error"] = err.Error()
	} else if err := json.Unmarshal([]byte(line), &m); err != nil {
		m = map[string]string{"error": fmt.Sprintf("sysinfo: %v", err)}
	}
	for _, p := range []string{"halt_poll_ns", "halt_poll_ns_grow", "halt_poll_ns_grow_start", "halt_poll_ns_shrink"} {
		if b, err := os.ReadFile("/sys/module/kvm/parameters/" + p); err == nil {
			m["l1_"+p] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// lxUnit is each measurement's headline detail.
var lxUnit = map[string]string{"tcp_rx": "tcp_rx_mbps", "tcp_tx": "tcp_tx_mbps", "udp_rx": "udp_rx_pps", "udp_tx": "udp_tx_pps", "rr": "rr_tps"}

// lxMeasure runs measurement m and puts its value and its counters per
// frame, prefixed with m, into d.
func (r *runner) lxMeasure(ns *Namespace, g *guestProc, m string, d map[string]float64) error {
	before, err := g.lxSnapshot(ns)
	if err != nil {
		return err
	}
	if m == "rr" {
		rr, err := requestResponse(ns, time.Duration(r.secs)*time.Second)
		if err != nil {
			return err
		}
		if rr.Trips == 0 {
			return errors.New("no round trip")
		}
		d["rr_tps"] = float64(rr.Trips) / rr.Elapsed.Seconds()
		d["rr_p50_us"] = float64(rr.P50.Nanoseconds()) / 1e3
		d["rr_p99_us"] = float64(rr.P99.Nanoseconds()) / 1e3
	} else {
		v, err := iperf(ns, m, r.secs)
		if err != nil {
			return err
		}
		d[lxUnit[m]] = v
	}
	after, err := g.lxSnapshot(ns)
	if err != nil {
		return err
	}
	for k, v := range lxPerFrame(before, after, g.cmd.Process.Pid) {
		d[m+"_"+k] = v
	}
	return nil
}

// lxPerFrame is what happened between two snapshots, per frame that
// crossed the tap (either way): KVM's exits (less port I/O) and injected
// interrupts, the driver's notifies and the VMM's host CPU in us, with the
// frame count and the worker's CPU.
func lxPerFrame(before, after lxSnap, pid int) map[string]float64 {
	frames := float64(after.tapRx-before.tapRx) + float64(after.tapTx-before.tapTx)
	d := map[string]float64{"frames": frames}
	if frames <= 0 {
		return d
	}
	if k, err := after.kvm.Sub(before.kvm); err == nil {
		d["exits_per_frame"] = float64(k["exits"]-min(k["exits"], k["io_exits"])) / frames
		d["irqs_per_frame"] = float64(k["irq_injections"]) / frames
		// Every other counter per frame: which exits, the halt polls
		// and their time (in us), the emulated instructions.
		for name, v := range k {
			switch {
			case name == "exits" || name == "irq_injections":
			case strings.HasSuffix(name, "_ns"):
				d["kvm_"+strings.TrimSuffix(name, "_ns")+"_us_per_frame"] = float64(v) / 1e3 / frames
			default:
				d["kvm_"+name+"_per_frame"] = float64(v) / frames
			}
		}
	}
	for name, v := range after.guest {
		if b, ok := before.guest[name]; ok && v >= b {
			d["guest_"+name+"_per_frame"] = float64(v-b) / frames
		}
	}
	if after.hostIRQs != nil && before.hostIRQs != nil && after.vcpuCPU >= 0 {
		// The host's interrupts where the vCPU runs: each one that came
		// while the guest ran is an exit (a TLB shootdown: a thread of
		// the VMM changed the mappings of the process the vCPU is in).
		for name, v := range after.hostIRQs.onCPU(before.hostIRQs, after.vcpuCPU) {
			d["vcpu_cpu_irq_"+name+"_per_frame"] = float64(v) / frames
		}
	}
	if before.kicksErr == nil && after.kicksErr == nil && after.kicks >= before.kicks {
		d["kicks_per_frame"] = float64(after.kicks-before.kicks) / frames
	}
	sw := after.sw.since(before.sw, pid)
	addCPUPerFrame(d, sw, frames)
	d["worker_cpu_ms"] = float64(sw["vmm_worker_cpu_ms"])
	return d
}
