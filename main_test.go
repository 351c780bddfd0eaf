package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/ptytest"
	"tinyvmm/kvm"
	"tinyvmm/vmm"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// buildBinary builds tinyvmm once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tinyvmm-cli-test")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "tinyvmm")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// minimalELF is a 64-bit ELF kernel whose code writes 3 to the exit device.
func minimalELF() []byte {
	code := []byte{0x66, 0xba, 0x01, 0x05, 0xb0, 0x03, 0xee, 0xf4} // mov dx,0x501; mov al,3; out dx,al; hlt
	le := binary.LittleEndian
	b := make([]byte, 0x200+len(code))
	copy(b, "\x7fELF\x02\x01\x01")
	le.PutUint16(b[16:], 2)
	le.PutUint16(b[18:], 62)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], 0x100000)
	le.PutUint64(b[32:], 64)
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	ph := b[64:]
	le.PutUint32(ph[0:], 1)
	le.PutUint32(ph[4:], 5)
	le.PutUint64(ph[8:], 0x200)
	le.PutUint64(ph[16:], 0x100000)
	le.PutUint64(ph[24:], 0x100000)
	le.PutUint64(ph[32:], uint64(len(code)))
	le.PutUint64(ph[40:], uint64(len(code)))
	copy(b[0x200:], code)
	return b
}

// TestCLIErrors runs the binary on every kind of bad input and checks it
// prints one tinyvmm: line and exits 2 (usage) or 1 (runtime), with no
// panic or stack trace.
func TestCLIErrors(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notKernel := write("notes.txt", []byte("hello, I am not a kernel"))
	kernel := write("vmlinux", minimalELF())
	bigInitrd := write("big.cpio", make([]byte, 40<<20))
	unreadable := write("secret", minimalELF())
	missing := filepath.Join(dir, "no-such-kernel")
	os.Chmod(unreadable, 0)
	noGuest := t.TempDir() // no default guest here

	h := kvm.Detect()
	cases := []struct {
		name   string
		args   []string
		status int
		want   string
	}{
		{"no command", nil, 2, "Usage"},
		{"unknown command", []string{"fly"}, 2, `unknown command "fly"`},
		{"unknown benchmark", []string{"bench", "fly"}, 2, `unknown benchmark "fly"`},
		{"a lab benchmark", []string{"bench", "e2e", "--runs", "1"}, 2, "bench e2e is in the lab command: tinyvmm-lab bench e2e"},
		{"unknown flag", []string{"run", "--bogus"}, 2, "unknown flag --bogus"},
		{"QEMU's -m", []string{"run", "-m", "512"}, 2, "unknown flag --m; did you mean --mem?"},
		{"typo of a flag", []string{"run", "--kernal", kernel}, 2, "unknown flag --kernal; did you mean --kernel?"},
		{"timeout without a unit", []string{"run", "--timeout", "10"}, 2, "--timeout 10: a duration needs a unit: 10s or 10m"},
		{"net with a bare tap name", []string{"run", "--net", "tap0"}, 2, `--net "tap0": did you mean --net tap=tap0?`},
		{"mem in decimal megabytes", []string{"run", "--mem", "512MB"}, 2, `--mem "512MB": sizes are powers of two; did you mean 512M (512MiB)?`},
		{"mem 0", []string{"run", "--mem", "0", "--kernel", kernel}, 2, "memory size is 0"},
		{"mem junk", []string{"run", "--mem", "lots"}, 2, `--mem "lots" is not a size`},
		{"cpus junk", []string{"run", "--cpus", "x"}, 2, `--cpus "x": not a number`},
		{"flag without value", []string{"run", "--kernel"}, 2, "--kernel needs a value"},
		{"cpus 0", []string{"run", "--cpus", "0", "--kernel", kernel}, 2, "--cpus 0"},
		{"notify", []string{"run", "--notify", "poll", "--kernel", kernel}, 2, "--notify"},
		{"bad net", []string{"run", "--net", "tap"}, 2, "--net"},
		{"bad mac", []string{"run", "--net", "tap=t0,mac=zz"}, 2, "mac"},
		{"stray argument", []string{"run", "--kernel", kernel, "ls"}, 2, "after --"},
		{"empty command", []string{"run", "--kernel", kernel, "--"}, 2, "nothing after --"},
		{"missing kernel", []string{"run", "--kernel", filepath.Join(dir, "nope")}, 1, "cannot read kernel"},
		{"no default guest", []string{"run"}, 1, "make guest"},
		{"not a kernel", []string{"run", "--kernel", notKernel}, 1, "not a Linux kernel"},
		{"initrd too big", []string{"run", "--kernel", kernel, "--initrd", bigInitrd, "--mem", "32M"}, 1, "initrd"},

		// Bad flag values are usage errors (2), found before anything is
		// loaded: the kernel named here does not exist.
		{"mtu too small", []string{"run", "--net", "tap=t0,mtu=67", "--kernel", missing}, 2, "--net mtu=67 is outside 68..65535"},
		{"mtu too large", []string{"run", "--net", "tap=t0,mtu=70000", "--kernel", missing}, 2, "--net mtu=70000 is outside"},
		{"rx-batch negative", []string{"run", "--net", "tap=t0", "--rx-batch", "-1", "--kernel", missing}, 2, "--rx-batch -1"},
		{"tx weight negative", []string{"run", "--net", "tap=t0", "--tx-weight-pkts", "-5", "--kernel", missing}, 2, "--tx-weight-pkts -5 is negative"},
		{"tuning negative without --net", []string{"run", "--rx-weight-bytes", "-1", "--kernel", missing}, 2, "--rx-weight-bytes -1 is negative"},
		{"rx-batch 0", []string{"run", "--net", "tap=t0", "--rx-batch", "0", "--kernel", missing}, 2, "--rx-batch 0: give at least 1"},
		{"notify-threshold 0", []string{"run", "--notify-threshold", "0", "--kernel", missing}, 2, "--notify-threshold 0: give at least 1"},
		{"poll-us negative", []string{"run", "--net", "tap=t0", "--poll-us", "-5", "--kernel", missing}, 2, "--poll-us -5 is negative"},
		{"rx-irq-us negative", []string{"run", "--rx-irq-us", "-1", "--kernel", missing}, 2, "--rx-irq-us -1 is negative"},
		{"stats file in no directory", []string{"run", "--stats=/nonexistent/x.json", "--kernel", missing}, 2, "--stats=/nonexistent/x.json: cannot write it"},
		{"bench device bad flag", []string{"bench", "device", "--bogus"}, 2, "unknown flag --bogus; see tinyvmm bench device --help"},
		// Were these accepted, the short times keep the run brief.
		{"bench device runs -1", []string{"bench", "device", "--runs", "-1", "--only", "000", "--thresholds", "1",
			"--threshold-time", "1ms", "--json", "", "--plot", ""}, 2, "--runs -1"},
	}
	if os.Geteuid() != 0 {
		cases = append(cases, struct {
			name   string
			args   []string
			status int
			want   string
		}{"unreadable kernel", []string{"run", "--kernel", unreadable}, 1, "permission denied"})
	}
	if !h.Usable {
		cases = append(cases, struct {
			name   string
			args   []string
			status int
			want   string
		}{"no /dev/kvm", []string{"run", "--kernel", kernel}, 1, h.Why})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			cmd.Env = append(os.Environ(), "TINYVMM_GUEST_DIR="+noGuest)
			cmd.Dir = noGuest
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			status := 0
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			msg := stderr.String()
			if status != c.status {
				t.Errorf("exit status %d, want %d; stderr %q", status, c.status, msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("stderr %q lacks %q", msg, c.want)
			}
			if strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
				t.Errorf("stack trace on stderr: %q", msg)
			}
			if c.want != "Usage" {
				lines := strings.Split(strings.TrimSpace(msg), "\n")
				if len(lines) != 1 || !strings.HasPrefix(lines[0], "tinyvmm: ") {
					t.Errorf("stderr is not one tinyvmm: line: %q", msg)
				}
			}
		})
	}
}

func TestCLIHelp(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{"--help"}, {"run", "--help"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(string(out), "tinyvmm run") {
			t.Errorf("%v output lacks the run usage: %s", args, out)
		}
	}
	out, _ := exec.Command(bin, "run", "--help").Output()
	for _, want := range []string{"--kernel PATH", "--mem SIZE", "--net SPEC", "tap=NAME[,OPTS]", "--stats[=FILE]", "Ctrl-A x", "-- CMD",
		"Basic flags:", "Network:", "Sharing and the guest's root:", "Tuning the net device's worker:", "Debugging and benchmarks:", "--rx-batch N"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	checkHelpScans(t, "run --help", string(out))
	if strings.Contains(string(out), "Other flags:") {
		t.Errorf("run --help has flags in no group:\n%s", out[strings.Index(string(out), "Other flags:"):])
	}
	if strings.Contains(string(out), "cpuprofile") {
		t.Error("run --help shows the development flag --cpuprofile")
	}
	top, _ := exec.Command(bin, "--help").Output()
	checkHelpScans(t, "--help", string(top))
	for _, b := range []string{"device"} {
		out, err := exec.Command(bin, "bench", b, "--help").Output()
		if err != nil || !strings.Contains(string(out), "Usage: tinyvmm bench "+b) || !strings.Contains(string(out), "  --runs N") {
			t.Errorf("bench %s --help: %v, stdout %q; want its usage and flags as --name, status 0", b, err, out)
		}
		checkHelpScans(t, "bench "+b+" --help", string(out))
	}
}

// checkHelpScans wants help that reads in an 80-column terminal, with each
// flag shown as users type it (--name, never -name).
func checkHelpScans(t *testing.T, what, out string) {
	t.Helper()
	for i, line := range strings.Split(out, "\n") {
		if len(line) > 80 {
			t.Errorf("%s line %d is %d characters: %q", what, i+1, len(line), line)
		}
		if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
			t.Errorf("%s line %d shows a flag with one dash: %q", what, i+1, line)
		}
	}
}

// TestCLIGuestExitStatus boots a tiny kernel that reports status 3.
func TestCLIGuestExitStatus(t *testing.T) {
	if h := kvm.Detect(); !h.Usable {
		t.Skip(h.Why)
	}
	bin := buildBinary(t)
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	os.WriteFile(kernel, minimalELF(), 0o644)
	err := exec.Command(bin, "run", "--kernel", kernel, "--mem", "64M", "--", "true").Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit %v, want status 3", err)
	}
}

// TestCLITerminalRestored runs tinyvmm interactively on a pseudo-terminal
// with a tiny kernel: where there is no /dev/kvm the run fails (the error
// path), where there is the guest exits 3. Either way the terminal went
// raw and must come back as it was, before tinyvmm's last line (a bare
// "\n" would mean it printed while the terminal was still raw).
func TestCLITerminalRestored(t *testing.T) {
	bin := buildBinary(t)
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	os.WriteFile(kernel, minimalELF(), 0o644)
	p, err := ptytest.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before, err := p.Termios()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--kernel", kernel, "--mem", "64M")
	if err := p.Start(cmd); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	want := 3
	if h := kvm.Detect(); !h.Usable {
		want = 1
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != want {
		t.Errorf("exit %v, want status %d", err, want)
	}
	after, err := p.Termios()
	if err != nil {
		t.Fatal(err)
	}
	if d := ptytest.Diff(before, after); d != "" {
		t.Errorf("terminal not restored: %s", d)
	}
	if err := p.Expect("Ctrl-A x to quit", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if want == 1 {
		if err := p.Expect("\ntinyvmm: ", 10*time.Second); err != nil { // the error, on a line of its own
			t.Fatal(err)
		}
	}
	if err := p.Flush(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if out := p.Output(); strings.Contains(strings.ReplaceAll(out, "\r\n", ""), "\n") {
		t.Errorf("a line printed in raw mode (bare \\n):\n%q", out)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"256M": 256 << 20, "1G": 1 << 30, "512k": 512 << 10, "64": 64 << 20, "2GiB": 2 << 30, "1T": 1 << 40, "0": 0,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "M", "-1G", "1.5G", "12X", "99999999999999999999G", "512MB", "1GB", "512B", "512iB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// TestCLIBusyTap holds a tap open inside a namespace of its own and runs
// tinyvmm on it there: the error is one line, before any KVM use.
func TestCLIBusyTap(t *testing.T) {
	ns := netnstest.Setup(t)
	var fd int
	err := ns.Do(func() error {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq("tvbusy0")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		return unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) }) // runs before the namespace goes
	bin := buildBinary(t)
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	os.WriteFile(kernel, minimalELF(), 0o644)
	noGuest := t.TempDir()
	cmd := exec.Command(bin, "run", "--kernel", kernel, "--mem", "32M", "--net", "tap=tvbusy0")
	cmd.Env = append(os.Environ(), "TINYVMM_GUEST_DIR="+noGuest)
	cmd.Dir = noGuest
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := ns.Do(cmd.Start); err != nil { // started in the namespace
		t.Fatal(err)
	}
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1; stderr %q", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "tinyvmm: tap tvbusy0 is busy") {
		t.Fatalf("stderr %q, want one line saying the tap is busy", stderr.String())
	}
}

// TestSignalDuringSetupKeepsTheError: a SIGTERM that arrives while the VM
// is being set up must not hide why the setup failed; one that stops the
// running guest is reported as such, with status 128+15.
func TestSignalDuringSetupKeepsTheError(t *testing.T) {
	orig := runVM
	t.Cleanup(func() { runVM = orig })
	for _, tc := range []struct {
		name   string
		result func(ctx context.Context) error
		status int
		want   string
	}{
		{"setup fails", func(context.Context) error { return errors.New("cannot open /dev/kvm: the real reason") },
			1, "tinyvmm: cannot open /dev/kvm: the real reason\n"},
		{"guest stopped", func(ctx context.Context) error { return fmt.Errorf("guest stopped: %w", context.Cause(ctx)) },
			128 + int(syscall.SIGTERM), "tinyvmm: stopped by terminated\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runVM = func(ctx context.Context, cfg vmm.Config) (int, error) {
				syscall.Kill(os.Getpid(), syscall.SIGTERM) // caught by boot's signal.Notify
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					return 0, errors.New("the SIGTERM never arrived")
				}
				return 1, tc.result(ctx)
			}
			var stdout, stderr strings.Builder
			if status := boot(vmm.Config{}, true, 0, &stdout, &stderr); status != tc.status || stderr.String() != tc.want {
				t.Errorf("status %d, stderr %q; want %d, %q", status, stderr.String(), tc.status, tc.want)
			}
		})
	}
}

// TestBootStatuses: each way a guest ends badly is its own status and one
// line on stderr.
func TestBootStatuses(t *testing.T) {
	orig := runVM
	t.Cleanup(func() { runVM = orig })
	for _, tc := range []struct {
		name    string
		run     func(ctx context.Context) (int, error)
		timeout time.Duration
		status  int
		want    string
	}{
		{"timeout", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 1, fmt.Errorf("guest stopped: %w", context.Cause(ctx))
		}, 50 * time.Millisecond, 124, "tinyvmm: guest still running after 50ms (--timeout); stopped it\n"},
		{"panic", func(context.Context) (int, error) {
			return vmm.GuestStop{Reason: vmm.StopPanic, Detail: "Attempted to kill init! exitcode=0x00000000"}.Result()
		}, 0, 121, "tinyvmm: guest kernel panic: Attempted to kill init! exitcode=0x00000000\n"},
		{"no init", func(context.Context) (int, error) {
			return vmm.GuestStop{Reason: vmm.StopNoInit, Detail: "No working init found."}.Result()
		}, 0, 122, "tinyvmm: guest kernel found no init to run: No working init found.\n"},
		{"triple fault", func(context.Context) (int, error) {
			return vmm.GuestStop{Reason: vmm.StopTripleFault, Detail: "vCPU 0, RIP 0x1000"}.Result()
		}, 0, 123, "tinyvmm: guest triple-faulted (vCPU 0, RIP 0x1000): its kernel crashed early; check --kernel, --append and the console output above\n"},
		{"command status passes", func(context.Context) (int, error) { return 7, nil }, time.Hour, 7, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runVM = func(ctx context.Context, cfg vmm.Config) (int, error) { return tc.run(ctx) }
			var stdout, stderr strings.Builder
			if status := boot(vmm.Config{}, true, tc.timeout, &stdout, &stderr); status != tc.status || stderr.String() != tc.want {
				t.Errorf("status %d, stderr %q; want %d, %q", status, stderr.String(), tc.status, tc.want)
			}
		})
	}
}
