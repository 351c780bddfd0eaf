package guest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"tinyvmm/internal/scratchns"
)

// artifacts are the outputs of guest/build.sh.
type artifacts struct {
	vmlinux, initramfs, pauseInitramfs string
}

// needArtifacts returns the built guest, or skips the test in one line.
func needArtifacts(t *testing.T) artifacts {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	dir := filepath.Join("..", "out", "guest")
	a := artifacts{
		vmlinux:        filepath.Join(dir, "vmlinux"),
		initramfs:      filepath.Join(dir, "initramfs.cpio"),
		pauseInitramfs: filepath.Join(dir, "initramfs-pause.cpio"),
	}
	for _, f := range []string{a.vmlinux, a.initramfs, a.pauseInitramfs} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("%s is missing: run 'bash guest/build.sh' (make guest)", f)
		}
	}
	return a
}

// tcgCmdline is what every TCG boot appends: a console, no delay-loop
// calibration, no mitigations.
const tcgCmdline = "console=ttyS0 lpj=1000000 mitigations=off"

// encodeCmd encodes argv for tinyvmm.cmd= as the guest's init decodes it.
func encodeCmd(argv ...string) string {
	raw, _ := json.Marshal(argv)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// console collects a guest's serial output and lets a test wait for text.
type console struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newConsole() *console { return &console{changed: make(chan struct{}, 1)} }

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// waitFor waits until the output matches re, or ctx ends.
func (c *console) waitFor(ctx context.Context, re *regexp.Regexp) error {
	for {
		if re.MatchString(c.String()) {
			return nil
		}
		select {
		case <-c.changed:
		case <-ctx.Done():
			return fmt.Errorf("no %q on the console: %w", re, ctx.Err())
		}
	}
}

// qemuVM is one QEMU process booting the guest.
type qemuVM struct {
	cmd     *exec.Cmd
	console *console
	stdin   io.WriteCloser
	started time.Time
	done    chan struct{}
	err     error // valid after done
}

// startQEMU starts qemu-system-x86_64 args, inside ns unless ns is nil.
// The VM is killed when the test ends.
func startQEMU(t *testing.T, ns *scratchns.NS, args ...string) *qemuVM {
	t.Helper()
	argv := []string{"qemu-system-x86_64",
		"-accel", "tcg", "-nodefaults", "-no-user-config", "-no-reboot",
		"-display", "none", "-monitor", "none", "-serial", "stdio",
		"-device", "isa-debug-exit,iobase=0x501,iosize=1"}
	argv = append(argv, args...)
	vm := &qemuVM{console: newConsole(), done: make(chan struct{})}
	vm.cmd = exec.Command(argv[0], argv[1:]...)
	vm.cmd.Stdout = vm.console
	vm.cmd.Stderr = vm.console
	stdin, err := vm.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	vm.stdin = stdin
	vm.started = time.Now()
	start := vm.cmd.Start
	if ns != nil {
		start = func() error { return ns.Do(vm.cmd.Start) }
	}
	if err := start(); err != nil {
		t.Fatalf("starting QEMU: %v", err)
	}
	go func() {
		vm.err = vm.cmd.Wait()
		close(vm.done)
	}()
	t.Cleanup(func() {
		vm.stdin.Close()
		select {
		case <-vm.done:
		default:
			vm.cmd.Process.Kill() // our own child, by PID
			<-vm.done
		}
		if t.Failed() {
			t.Logf("console:\n%s", vm.console)
		}
	})
	return vm
}

// exitStatus waits for QEMU to exit and decodes the status the guest wrote
// to isa-debug-exit: QEMU exits with (status << 1) | 1.
func (vm *qemuVM) exitStatus(ctx context.Context) (int, error) {
	select {
	case <-vm.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("the guest did not exit: %w", ctx.Err())
	}
	var exitErr *exec.ExitError
	switch {
	case vm.err == nil:
		return 0, errors.New("QEMU exited 0: the guest stopped without writing to the exit port")
	case errors.As(vm.err, &exitErr) && exitErr.ExitCode() > 0 && exitErr.ExitCode()&1 == 1:
		return exitErr.ExitCode() >> 1, nil
	default:
		return 0, fmt.Errorf("QEMU failed: %v", vm.err)
	}
}

var printkTime = regexp.MustCompile(`(?m)^\[\s*(\d+\.\d+)\] (.*)$`)

// kernelTime returns the printk timestamp of the first console line that
// contains text, in seconds since the kernel started.
func kernelTime(consoleText, text string) (float64, bool) {
	for _, m := range printkTime.FindAllStringSubmatch(consoleText, -1) {
		if bytes.Contains([]byte(m[2]), []byte(text)) {
			secs, err := strconv.ParseFloat(m[1], 64)
			return secs, err == nil
		}
	}
	return 0, false
}
