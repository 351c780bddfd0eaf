package guest

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tcgBootTimeout bounds each boot under TCG: emulation is slow and the
// machine is shared, but a healthy boot takes seconds.
const tcgBootTimeout = 3 * time.Minute

// initErrorLine matches the one line init prints when something fails.
var initErrorLine = regexp.MustCompile(`(?m)^init: `)

// microvmArgs boots the guest on QEMU's microvm: no firmware, no PCI.
func microvmArgs(a artifacts, initrd, cmdline string) []string {
	return []string{
		"-M", "microvm,acpi=off", "-m", "256M", "-smp", "1",
		"-kernel", a.vmlinux, "-initrd", initrd, "-append", tcgCmdline + " " + cmdline,
	}
}

func TestQEMURunsCommandAndReportsExitStatus(t *testing.T) {
	a := needArtifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), tcgBootTimeout)
	defer cancel()

	vm := startQEMU(t, nil, microvmArgs(a, a.initramfs,
		"tinyvmm.cmd="+encodeCmd("sh", "-c", "echo hello; exit 7"))...)
	status, err := vm.exitStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := vm.console.String()
	if status != 7 {
		t.Errorf("exit status %d, want 7", status)
	}
	if !regexp.MustCompile(`(?m)^hello\r?$`).MatchString(out) {
		t.Error(`no "hello" line on the console`)
	}
	if initErrorLine.MatchString(out) {
		t.Error("init printed an error")
	}
	runInit, _ := kernelTime(out, "Run /init")
	t.Logf("TCG microvm: command ran and QEMU exited after %.1fs (kernel reached /init at %.2fs)",
		time.Since(vm.started).Seconds(), runInit)
}

func TestQEMUCommandNotFound(t *testing.T) {
	a := needArtifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), tcgBootTimeout)
	defer cancel()

	vm := startQEMU(t, nil, microvmArgs(a, a.initramfs, "tinyvmm.cmd="+encodeCmd("no-such-command"))...)
	status, err := vm.exitStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status != 127 {
		t.Errorf("exit status %d, want 127", status)
	}
	if n := len(initErrorLine.FindAllString(vm.console.String(), -1)); n != 1 {
		t.Errorf("init printed %d error lines, want 1", n)
	}
}

func TestQEMUShellOnConsole(t *testing.T) {
	a := needArtifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), tcgBootTimeout)
	defer cancel()

	vm := startQEMU(t, nil, microvmArgs(a, a.initramfs, "")...)
	if err := vm.console.waitFor(ctx, regexp.MustCompile(`Run /init(?s:.*)/ # `)); err != nil {
		t.Fatal(err)
	}
	// $(tty) proves the shell has a real terminal; 6*7 that the shell ran it.
	if _, err := vm.stdin.Write([]byte("echo shell-$((6*7)) $(tty); exit\n")); err != nil {
		t.Fatal(err)
	}
	status, err := vm.exitStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status != 0 {
		t.Errorf("exit status %d after the shell exited, want 0", status)
	}
	if !strings.Contains(vm.console.String(), "shell-42 /dev/ttyS0") {
		t.Error(`the shell did not answer "shell-42 /dev/ttyS0"`)
	}
	if strings.Contains(vm.console.String(), "job control turned off") {
		t.Error("the shell has no controlling terminal")
	}
}
