package vmm

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/syncbuf"
	"tinyvmm/internal/threadname"
	"tinyvmm/kvm"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtionet"
)

// These boot the real guest from `make guest` under tinyvmm. They need a
// usable /dev/kvm and the built guest, and say in one line why they skip.

// guestFile finds out/guest/name ($TINYVMM_GUEST_DIR first).
func guestFile(t *testing.T, name string) string {
	t.Helper()
	dirs := []string{filepath.Join("..", "out", "guest")}
	if d := os.Getenv("TINYVMM_GUEST_DIR"); d != "" {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("no out/guest/%s: run make guest", name)
	return ""
}

// waitWriter collects console output and closes found once it contains
// the text it waits for.
type waitWriter struct {
	syncbuf.Buffer
	want  string
	found chan struct{}

	mu   sync.Mutex
	last []byte // the tail of the output, enough to hold want
	seen bool
}

func (w *waitWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = append(w.last, p...)
	if !w.seen && strings.Contains(string(w.last), w.want) {
		w.seen = true
		close(w.found)
	}
	if keep := len(w.want); len(w.last) > keep {
		w.last = append(w.last[:0], w.last[len(w.last)-keep:]...)
	}
	return n, err
}

func TestLinuxGuestRunsCommand(t *testing.T) {
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	if h.PVM {
		t.Skip("host KVM is PVM: guest user space cannot make system calls here, so a command cannot run (TestLinuxGuestKernelAnswersPing boots the kernel only)")
	}
	kernel, initrd := guestFile(t, "vmlinux"), guestFile(t, "initramfs.cpio")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var console, log syncbuf.Buffer
	names := watchThreadNames()
	start := time.Now()
	status, err := Run(ctx, Config{
		Kernel: kernel, Initrd: initrd, MemBytes: 256 << 20, CPUs: 2,
		// seq's 8.9 KB outrun the UART: its last ~4 KB are still in the
		// guest's tty buffer when sh exits, and must not be lost.
		Command: []string{"sh", "-c", "echo hello; seq 1 2000; exit 7"},
		Console: &console, Log: &log, Stats: "-",
	})
	seen := names()
	out := console.String()
	if err != nil || status != 7 {
		t.Fatalf("status %d, err %v; want 7\nconsole:\n%s\nlog:\n%s", status, err, tail(out, 40), log.String())
	}
	// Each vCPU's thread carries its name while it runs (top -H, perf),
	// and none keeps it once Run has returned.
	for _, want := range []string{"vcpu0", "vcpu1"} {
		if !seen[want] {
			t.Errorf("no thread was named %s while the guest ran (saw %v)", want, seen)
		}
	}
	for name := range threadNames() {
		if strings.HasPrefix(name, "vcpu") {
			t.Errorf("a thread is still named %s after Run returned", name)
		}
	}
	if !regexp.MustCompile(`(?m)^hello\r?$`).MatchString(out) {
		t.Errorf("no hello line on the console:\n%s", tail(out, 40))
	}
	if !regexp.MustCompile(`(?m)^1999\r?\n2000\r?$`).MatchString(out) {
		t.Errorf("the command's last output lines are missing (not drained before the exit):\n%s", tail(out, 5))
	}
	if strings.Contains(out, "Linux version") {
		t.Errorf("with a command, stdout should carry its output, not the boot log:\n%s", tail(out, 40))
	}
	t.Logf("command ran, tinyvmm done after %v; %s", time.Since(start), strings.TrimSpace(log.String()))
}

// TestLinuxGuestKernelAnswersPing boots the kernel-only guest (a pause
// init that makes no system calls) with a NIC on a tap in a namespace of
// its own and ip=, waits for the kernel to run /init, then pings it from
// the namespace: the kernel itself answers, through virtio-pci, MSI-X and
// the device's datapath. This is the Linux test PVM can run (see the PVM
// notes); every kernel instruction is emulated there, so it takes minutes.
func TestLinuxGuestKernelAnswersPing(t *testing.T) {
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	kernel, initrd := guestFile(t, "vmlinux"), guestFile(t, "initramfs-pause.cpio")
	pingPath, err := exec.LookPath("ping")
	if err != nil {
		t.Skip("no ping: apt-get install iputils-ping")
	}
	ns := netnstest.Setup(t)
	if _, err := ns.AddTap("tvko0", "10.0.2.1/24"); err != nil {
		t.Fatal(err)
	}
	limit := 2 * time.Minute // nested under TCG
	if h.PVM {
		limit = 8 * time.Minute // 85-100 s measured; a loaded machine takes longer
	}
	if deadline, ok := t.Deadline(); ok && time.Until(deadline)-30*time.Second < limit {
		limit = time.Until(deadline) - 30*time.Second // fail with the console, not a go test panic
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	console := &waitWriter{want: "Run /init", found: make(chan struct{})}
	var log syncbuf.Buffer
	start := time.Now()
	type result struct {
		status int
		err    error
	}
	res := make(chan result, 1)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var nc NetConfig
	nc.Ifname = "tvko0"
	cfg := Config{
		Kernel: kernel, Initrd: initrd, MemBytes: 256 << 20, CPUs: 1, Nets: []NetConfig{nc},
		Cmdline: "ip=10.0.2.15::10.0.2.1:255.255.255.0::eth0:off",
		Console: console, Log: &log,
	}
	go ns.Do(func() error { // Run opens the tap inside the namespace
		s, err := Run(runCtx, cfg)
		res <- result{s, err}
		return nil
	})
	stopGuest := func() {
		stop()
		<-res
	}
	select {
	case <-console.found:
		t.Logf("kernel reached /init after %v (PVM: %v)", time.Since(start).Round(time.Second/10), h.PVM)
	case r := <-res:
		t.Fatalf("guest stopped before /init: status %d, err %v\nconsole:\n%s\nlog:\n%s", r.status, r.err, tail(console.String(), 40), log.String())
	case <-ctx.Done():
		stopGuest()
		t.Fatalf("no \"Run /init\" within %v\nconsole:\n%s", limit, tail(console.String(), 40))
	}
	defer stopGuest()
	ping := exec.CommandContext(ctx, pingPath, "-c", "3", "-i", "0.5", "-w", "30", "10.0.2.15")
	var out syncbuf.Buffer
	ping.Stdout, ping.Stderr = &out, &out
	if err := ns.Do(ping.Start); err != nil {
		t.Fatal(err)
	}
	// iputils says "3 received", busybox (in the nested L1) "3 packets received".
	if err := ping.Wait(); err != nil || !regexp.MustCompile(`\b3 (packets )?received`).MatchString(out.String()) {
		t.Fatalf("ping 10.0.2.15 from the namespace: %v\n%s\nconsole:\n%s", err, out.String(), tail(console.String(), 30))
	}
	rtt := regexp.MustCompile(`(?:rtt|round-trip) (\S+) = (\S+)`).FindStringSubmatch(out.String())
	if rtt == nil {
		rtt = []string{"", "min/avg/max", "?"}
	}
	t.Logf("the kernel answered 3 pings %v after start, rtt %s %s ms", time.Since(start).Round(time.Second/10), rtt[1], rtt[2])
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// TestLinuxGuestFindsVirtioNet boots the guest with a NIC on a tap in a
// namespace of its own and has it print eth0's MAC: PCI enumeration, the
// virtio-pci transport, MSI-X and the net device's config space, end to
// end. The guest configures no address.
func TestLinuxGuestFindsVirtioNet(t *testing.T) {
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	if h.PVM {
		t.Skip("host KVM is PVM: guest user space cannot make system calls here (TestLinuxGuestKernelAnswersPing covers the NIC)")
	}
	kernel, initrd := guestFile(t, "vmlinux"), guestFile(t, "initramfs.cpio")
	ns := netnstest.Setup(t)
	mac := "52:54:00:12:34:56"
	var nc NetConfig
	nc.Ifname = "tvnet0"
	nc.MAC, _ = net.ParseMAC(mac)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var console, log syncbuf.Buffer
	var status int
	var runErr error
	err := ns.Do(func() error { // the tap is created inside the namespace
		status, runErr = Run(ctx, Config{
			Kernel: kernel, Initrd: initrd, MemBytes: 256 << 20, CPUs: 1, Nets: []NetConfig{nc},
			Command: []string{"cat", "/sys/class/net/eth0/address"},
			Console: &console, Log: &log, Stats: "-",
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := console.String()
	if runErr != nil || status != 0 {
		t.Fatalf("status %d, err %v\nconsole:\n%s\nlog:\n%s", status, runErr, tail(out, 40), log.String())
	}
	if !regexp.MustCompile(`(?m)^` + mac + `\r?$`).MatchString(out) {
		t.Fatalf("eth0's MAC %s not on the console:\n%s\nlog:\n%s", mac, tail(out, 40), log.String())
	}
	t.Logf("%s", strings.TrimSpace(log.String()))
}

// TestLinuxGuestPingsHost configures eth0 with ip= and has the guest ping
// the namespace side of its tap: tx and rx through the device, kicks and
// interrupts, in both notify modes, and with both ways of moving tap frames
// (io_uring, the CLI's default, and one writev/readv per frame).
func TestLinuxGuestPingsHost(t *testing.T) {
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	if h.PVM {
		t.Skip("host KVM is PVM: guest user space cannot make system calls here (TestLinuxGuestKernelAnswersPing covers the datapath)")
	}
	kernel, initrd := guestFile(t, "vmlinux"), guestFile(t, "initramfs.cpio")
	for _, tc := range []struct {
		notify pci.NotifyMode
		io     virtionet.IOMode
	}{
		{pci.NotifyIoeventfd, virtionet.IOUring},
		{pci.NotifyExit, virtionet.IOWritev},
	} {
		t.Run(tc.notify.String()+"-"+string(tc.io), func(t *testing.T) {
			ns := netnstest.Setup(t)
			if _, err := ns.AddTap("tvping0", "10.0.2.1/24"); err != nil {
				t.Fatal(err)
			}
			var nc NetConfig
			nc.Ifname, nc.IO = "tvping0", tc.io
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var console, log syncbuf.Buffer
			var status int
			var runErr error
			statsFile := filepath.Join(t.TempDir(), "stats.json")
			ns.Do(func() error {
				status, runErr = Run(ctx, Config{
					Kernel: kernel, Initrd: initrd, MemBytes: 256 << 20, CPUs: 1, Nets: []NetConfig{nc}, Notify: tc.notify,
					Cmdline: "ip=10.0.2.15::10.0.2.1:255.255.255.0::eth0:off",
					Command: []string{"ping", "-c", "3", "-W", "5", "10.0.2.1"},
					Console: &console, Log: &log, Stats: statsFile,
				})
				return nil
			})
			out := console.String()
			if runErr != nil || status != 0 {
				t.Fatalf("ping exited %d, err %v\nconsole:\n%s\nlog:\n%s", status, runErr, tail(out, 30), log.String())
			}
			if !strings.Contains(out, "3 packets received") {
				t.Errorf("ping did not report 3 replies:\n%s", tail(out, 15))
			}
			raw, err := os.ReadFile(statsFile)
			if err != nil {
				t.Fatal(err)
			}
			var stats struct {
				Nets []virtionet.Stats `json:"nets"`
			}
			if err := json.Unmarshal(raw, &stats); err != nil || len(stats.Nets) != 1 {
				t.Fatalf("stats %s: %v", raw, err)
			}
			if got := stats.Nets[0].IO; got != tc.io {
				t.Errorf("device moved frames with %q, want %q (log: %s)", got, tc.io, log.String())
			}
			t.Logf("%s\n%s", strings.TrimSpace(log.String()), raw)
		})
	}
}

// threadNames are the names of this process's threads now.
func threadNames() map[string]bool {
	names := map[string]bool{}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, e := range tasks {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			if name := threadname.Of(tid); name != "" {
				names[name] = true
			}
		}
	}
	return names
}

// watchThreadNames collects thread names every millisecond until the
// returned func is called, which returns every name seen.
func watchThreadNames() func() map[string]bool {
	stop, done := make(chan struct{}), make(chan map[string]bool)
	go func() {
		seen := map[string]bool{}
		for {
			for n := range threadNames() {
				seen[n] = true
			}
			select {
			case <-stop:
				done <- seen
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() map[string]bool { close(stop); return <-done }
}

// TestLinuxGuestBootsFromTruncatedFiles truncates the kernel and initrd
// files to nothing once Run has loaded them, before the guest runs its
// first instruction: the guest must boot and run its command all the same,
// since what it boots is the copy in its RAM, not the files. (Mapped from
// the files instead, the guest's pages past the new end are gone, and the
// guest or the VMM faults.)
func TestLinuxGuestBootsFromTruncatedFiles(t *testing.T) {
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	if h.PVM {
		t.Skip("host KVM is PVM: guest user space cannot make system calls here, so a command cannot run")
	}
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"vmlinux", "initramfs.cpio"} {
		b, err := os.ReadFile(guestFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	truncated := false
	testHookLoaded = func() {
		for _, p := range files {
			if err := os.Truncate(p, 0); err != nil {
				t.Error(err)
				return
			}
		}
		truncated = true
	}
	defer func() { testHookLoaded = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var console, log syncbuf.Buffer
	status, err := Run(ctx, Config{
		Kernel: files[0], Initrd: files[1], MemBytes: 256 << 20, CPUs: 1,
		Command: []string{"sh", "-c", "echo booted; exit 5"},
		Console: &console, Log: &log,
	})
	if !truncated {
		t.Fatal("the files were not truncated after the load")
	}
	out := console.String()
	if err != nil || status != 5 || !regexp.MustCompile(`(?m)^booted\r?$`).MatchString(out) {
		t.Fatalf("status %d, err %v; want 5 and a booted line\nconsole:\n%s\nlog:\n%s", status, err, tail(out, 30), log.String())
	}
}
