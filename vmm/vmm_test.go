package vmm

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tinyvmm/internal/syncbuf"
	"tinyvmm/kvm"
	"tinyvmm/usernetd"
	"tinyvmm/virtio/pci"
)

func TestCommandArgRoundTrips(t *testing.T) {
	argv := []string{"sh", "-c", "echo hello; exit 7", "ünï?=&"}
	arg := CommandArg(argv)
	enc, ok := strings.CutPrefix(arg, "tinyvmm.cmd=")
	if !ok {
		t.Fatalf("arg %q lacks tinyvmm.cmd=", arg)
	}
	if strings.ContainsAny(enc, "=+/ ") {
		t.Fatalf("encoding %q is not unpadded base64url", enc)
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		t.Fatal(err)
	}
	var back []string
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if strings.Join(back, "\x00") != strings.Join(argv, "\x00") {
		t.Fatalf("round trip %q, want %q", back, argv)
	}
}

func TestKernelCmdline(t *testing.T) {
	got := kernelCmdline(kvm.Host{Usable: true}, true, "  ip=10.0.0.2 loglevel=7 ", []string{"true"})
	want := "console=ttyS0 reboot=k panic=-1 quiet ip=10.0.0.2 loglevel=7 " + CommandArg([]string{"true"})
	if got != want {
		t.Fatalf("cmdline %q\nwant %q", got, want)
	}
	if shell := kernelCmdline(kvm.Host{Usable: true}, true, "", nil); strings.Contains(shell, "quiet") {
		t.Fatalf("interactive boot is quiet: %q", shell)
	}
	pvm := kernelCmdline(kvm.Host{Usable: true, PVM: true}, true, "", nil)
	if !strings.Contains(pvm, "lpj=") || !strings.Contains(pvm, "tsc=reliable") || strings.Contains(pvm, "tinyvmm.cmd") ||
		!regexp.MustCompile(`clearcpuid=\S*\bxsave\b`).MatchString(pvm) || !strings.Contains(pvm, "smap") {
		t.Fatalf("PVM cmdline %q", pvm)
	}
	if hw := kernelCmdline(kvm.Host{Usable: true}, true, "", nil); strings.Contains(hw, "lpj=") || strings.Contains(hw, "pci=off") {
		t.Fatalf("hardware cmdline with a NIC presets lpj or turns PCI off: %q", hw)
	}
	if noNIC := kernelCmdline(kvm.Host{Usable: true}, false, "", nil); !strings.Contains(noNIC, " pci=off") {
		t.Fatalf("a VM without PCI devices still has the kernel scan PCI: %q", noNIC)
	}
}

func TestEscapeFilter(t *testing.T) {
	f := &escapeFilter{}
	out, quit := f.filter([]byte("ab\x01\x01c\x01"))
	if quit || string(out) != "ab\x01c" {
		t.Fatalf("got %q quit=%v", out, quit)
	}
	// The Ctrl-A at the end of one read pairs with the next read.
	out, quit = f.filter([]byte("zq"))
	if quit || string(out) != "\x01zq" {
		t.Fatalf("got %q quit=%v", out, quit)
	}
	out, quit = f.filter([]byte("ls\x01xmore"))
	if !quit || string(out) != "ls" {
		t.Fatalf("got %q quit=%v", out, quit)
	}
}

func TestCancellableReader(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cr, err := newCancellableReader(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer cr.close()
	w.Write([]byte("hey"))
	buf := make([]byte, 8)
	if n, err := cr.Read(buf); err != nil || string(buf[:n]) != "hey" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	done := make(chan error, 1)
	go func() { _, err := cr.Read(buf); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cr.stop()
	select {
	case err := <-done:
		if !errors.Is(err, errReaderClosed) {
			t.Fatalf("stopped read returned %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("stop did not wake a blocked read")
	}
}

func TestStatsText(t *testing.T) {
	s := RunStats{FirstOutputMs: 12.5, ExitMs: 300, Exits: map[string]uint64{"KVM_EXIT_IO": 4, "KVM_EXIT_MMIO": 2}}
	txt := s.text([]string{"net tap0: rx 1 frames"})
	for _, want := range []string{"first console output after 12.5 ms", "stopped after 300.0 ms", "IO=4", "MMIO=2", "net tap0"} {
		if !strings.Contains(txt, want) {
			t.Errorf("stats text %q lacks %q", txt, want)
		}
	}
	s.FirstOutputMs = -1
	if !strings.Contains(s.text(nil), "no console output") {
		t.Error("missing no-output wording")
	}
	path := filepath.Join(t.TempDir(), "stats.json")
	if err := s.report(path, nil, nil); err != nil {
		t.Fatal(err)
	}
	var back RunStats
	raw, _ := os.ReadFile(path)
	if err := json.Unmarshal(raw, &back); err != nil || back.ExitMs != 300 || back.Exits["KVM_EXIT_IO"] != 4 {
		t.Fatalf("json %s: %v", raw, err)
	}
}

func TestConfigCheck(t *testing.T) {
	good := Config{Kernel: "k", MemBytes: 256 << 20, CPUs: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"mem 0":     func(c *Config) { c.MemBytes = 0 },
		"mem tiny":  func(c *Config) { c.MemBytes = 1 << 20 },
		"mem huge":  func(c *Config) { c.MemBytes = 1 << 50 },
		"cpus 0":    func(c *Config) { c.CPUs = 0 },
		"cpus 1000": func(c *Config) { c.CPUs = 1000 },
		"notify":    func(c *Config) { c.Notify = pci.NotifyExit + 1 },
		"no kernel": func(c *Config) { c.Kernel = "" },
		"tap empty": func(c *Config) { c.Nets = []NetConfig{{}} },
		"tap twice": func(c *Config) { c.Nets = make([]NetConfig, 2); c.Nets[0].Ifname, c.Nets[1].Ifname = "t", "t" },
		"queues 99": func(c *Config) { c.Nets = make([]NetConfig, 1); c.Nets[0].Ifname, c.Nets[0].Queues = "t", 99 },
		"user queues 2": func(c *Config) {
			c.Nets = []NetConfig{{User: &usernetd.Config{}}}
			c.Nets[0].Ifname, c.Nets[0].Queues = "user0", 2
		},
	} {
		c := good
		mut(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", name, err)
		}
	}
}

// TestRunChecksFilesBeforeKVM: file and content errors come before any
// /dev/kvm error, so they are reported the same on every machine.
func TestRunChecksFilesBeforeKVM(t *testing.T) {
	dir := t.TempDir()
	notKernel := filepath.Join(dir, "notes.txt")
	os.WriteFile(notKernel, []byte("just some text, not a kernel at all"), 0o644)
	kernel := filepath.Join(dir, "vmlinux")
	os.WriteFile(kernel, tinyELF(helloExit7, true), 0o644)
	bigInitrd := filepath.Join(dir, "initrd")
	os.WriteFile(bigInitrd, make([]byte, 20<<20), 0o644)

	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing kernel", Config{Kernel: filepath.Join(dir, "nope")}, "cannot read kernel"},
		{"not a kernel", Config{Kernel: notKernel}, "not a Linux kernel"},
		{"missing initrd", Config{Kernel: kernel, Initrd: filepath.Join(dir, "nope")}, "cannot read initrd"},
		{"initrd too big", Config{Kernel: kernel, Initrd: bigInitrd, MemBytes: 16 << 20}, "initrd"},
	}
	for _, c := range cases {
		if c.cfg.MemBytes == 0 {
			c.cfg.MemBytes = 64 << 20
		}
		c.cfg.CPUs = 1
		status, err := Run(context.Background(), c.cfg)
		if err == nil || status == 0 {
			t.Errorf("%s: status %d, err %v", c.name, status, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q lacks %q", c.name, err, c.want)
		}
	}
	if h := kvm.Detect(); !h.Usable {
		_, err := Run(context.Background(), Config{Kernel: kernel, MemBytes: 64 << 20, CPUs: 1})
		if err == nil || err.Error() != h.Why {
			t.Errorf("good kernel without KVM: %v, want %q", err, h.Why)
		}
	}
}

func runTiny(t *testing.T, code []byte, pvh bool, cpus int, ctx context.Context) (int, error, string) {
	t.Helper()
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	var console syncbuf.Buffer
	var log syncbuf.Buffer
	status, err := Run(ctx, Config{
		KernelData: tinyELF(code, pvh), MemBytes: 64 << 20, CPUs: cpus,
		Console: &console, Log: &log, Stats: "-",
	})
	t.Logf("log: %s", log.String())
	return status, err, console.String()
}

func TestRunPVHGuestExitStatusAndConsole(t *testing.T) {
	status, err, out := runTiny(t, helloExit7, true, 1, context.Background())
	if err != nil || status != 7 || out != "hi\n" {
		t.Fatalf("status %d, err %v, console %q; want 7, nil, \"hi\\n\"", status, err, out)
	}
}

func TestRunLongModeGuest(t *testing.T) {
	status, err, out := runTiny(t, helloExit7, false, 1, context.Background())
	if err != nil || status != 7 || out != "hi\n" {
		t.Fatalf("status %d, err %v, console %q", status, err, out)
	}
}

func TestRunWithAPsWaitingForSIPI(t *testing.T) {
	status, err, _ := runTiny(t, helloExit7, true, 3, context.Background())
	if err != nil || status != 7 {
		t.Fatalf("status %d, err %v", status, err)
	}
}

func TestRunTripleFaultIsAnError(t *testing.T) {
	status, err, _ := runTiny(t, tripleFault, true, 1, context.Background())
	if err == nil || status != StatusTripleFault || !strings.Contains(err.Error(), "triple-fault") {
		t.Fatalf("status %d, err %v", status, err)
	}
}

func TestRunRebootIsReported(t *testing.T) {
	_, err, _ := runTiny(t, i8042Reboot, true, 1, context.Background())
	if !errors.Is(err, ErrGuestRebooted) {
		t.Fatalf("err %v, want ErrGuestRebooted", err)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	status, err, _ := runTiny(t, spin, true, 2, ctx)
	if err == nil || status == 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("status %d, err %v", status, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v to stop", d)
	}
}

// userArgExit exits with the first byte of its argument string (RDI).
var userArgExit = []byte{
	0x8a, 0x07, // mov al, [rdi]
	0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
	0xee,       // out dx, al   (CPL3, allowed by IOPL 3)
	0xeb, 0xfe, // jmp $
}

func runUser(t *testing.T, code []byte, args string) (int, error) {
	t.Helper()
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	return Run(context.Background(), Config{
		KernelData: tinyELF(code, false), UserStart: true, Cmdline: args, MemBytes: 64 << 20, CPUs: 1,
	})
}

func TestRunUserStartGetsArgs(t *testing.T) {
	status, err := runUser(t, userArgExit, "Abc")
	if err != nil || status != 'A' {
		t.Fatalf("status %d, err %v; want %d", status, err, 'A')
	}
}

// TestRunUserStartStaysNative writes to COM1 (a port I/O exit to the
// VMM), then counts down from 10^8 and exits. Under PVM the user-mode start
// exists to run natively, port I/O included: in the instruction emulator
// the 2*10^8 instructions of the loop would take about a minute, natively
// well under a second.
func TestRunUserStartStaysNative(t *testing.T) {
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	const loops = 100_000_000
	code := []byte{
		0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
		0xb0, 'x', 0xee, // mov al, 'x'; out dx, al
		0x48, 0xb9, 0, 0, 0, 0, 0, 0, 0, 0, // movabs rcx, loops
		0x48, 0xff, 0xc9, // 1: dec rcx
		0x75, 0xfb, // jnz 1b
		0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
		0xb0, 0x07, 0xee, // mov al, 7; out dx, al
		0xeb, 0xfe, // jmp $
	}
	binary.LittleEndian.PutUint64(code[9:], loops)
	limit := 2 * time.Minute // nested, or TCG underneath
	if kvm.Detect().PVM {
		limit = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var console syncbuf.Buffer
	start := time.Now()
	status, err := Run(ctx, Config{
		KernelData: tinyELF(code, false), UserStart: true, MemBytes: 64 << 20, CPUs: 1, Console: &console,
	})
	took := time.Since(start)
	if err != nil || status != 7 || console.String() != "x" {
		t.Fatalf("status %d, err %v, console %q after %v; want 7 and \"x\" within %v", status, err, console.String(), took, limit)
	}
	t.Logf("%d loops after a port I/O exit in %v", loops, took)
}

func TestRunUserStartExceptionReportsVector(t *testing.T) {
	status, err := runUser(t, tripleFault, "") // ud2: #UD, vector 6, through the stub
	if err == nil || status == 0 || !strings.Contains(err.Error(), "#UD invalid opcode (vector 6) at RIP") {
		t.Fatalf("status %d, err %v; want an error naming #UD", status, err)
	}
}

func TestUserStartRejectsInitrdAndCommand(t *testing.T) {
	for _, c := range []Config{
		{Kernel: "k", UserStart: true, Initrd: "i", MemBytes: 64 << 20, CPUs: 1},
		{Kernel: "k", UserStart: true, Command: []string{"ls"}, MemBytes: 64 << 20, CPUs: 1},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--bench-guest") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
