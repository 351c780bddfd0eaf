package nested

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvGate turns the nested run on; it takes minutes, so plain `go test ./...`
// leaves it out. EnvPackages overrides which packages' tests run in L1, and
// EnvKernel the L1 kernel (default out/guest/bzImage); EnvQEMU and
// EnvFirmware (qemu.go) the emulator.
const (
	EnvGate     = "TINYVMM_NESTED"
	EnvPackages = "TINYVMM_NESTED_PKGS"
	EnvKernel   = "TINYVMM_NESTED_KERNEL"
)

// DefaultPackages are the packages whose tests need a /dev/kvm, or L1
// itself (l1init's root).
var DefaultPackages = []string{"./kvm/...", "./vmm/...", "./bench/e2e/...", "./bench/boot/...", "./bench/share/...", "./examples/...", "./test/nested/l1init"}

// TestNestedKVM boots L1 under QEMU TCG and runs kvmprobe, the KVM packages'
// tests and `tinyvmm run -- uname -a` there:
// TINYVMM_NESTED=1 go test -v -timeout 30m ./test/nested
func TestNestedKVM(t *testing.T) {
	repo, m := nestedMachine(t, "the KVM tests in an L1 under QEMU TCG (takes minutes)")
	pkgs := DefaultPackages
	if env := os.Getenv(EnvPackages); env != "" {
		pkgs = strings.Fields(env)
	}

	timeout := 25 * time.Minute
	if deadline, ok := t.Deadline(); ok {
		timeout = time.Until(deadline) - 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	work := t.TempDir()
	plan := Plan{Packages: pkgs, TestArgs: []string{"-test.v"}, ProbeExits: 10000}
	if _, err := os.Stat(filepath.Join(repo, "main.go")); err == nil {
		// A Linux L2 with user space: what PVM cannot run on this host.
		plan.Tinyvmm = []string{"run", "--", "uname", "-a"}
	}
	files, lines, err := Assemble(ctx, repo, work, plan, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	initramfs := writeInitramfsFile(t, work, files, lines)

	m.Initramfs, m.Output = initramfs, lineLogger{t}
	res, err := Boot(ctx, m)
	// The count of wakes closes every run, failed or not: CI counts them.
	defer t.Log(res.WakeSummary())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("L1 reached init after %v; whole run %v", res.ToInit.Round(100*time.Millisecond), res.Elapsed.Round(time.Second))
	if !res.KVM {
		t.Fatal("L1 has no /dev/kvm: kvm_amd did not load under TCG (see the console above)")
	}
	checkSteps(t, res)
}

// nestedMachine skips t unless EnvGate is set (run says what the test then
// runs) and L1 can boot here; it returns the repository and L1's kernel
// and emulator (EnvKernel, EnvQEMU and EnvFirmware override the defaults).
func nestedMachine(t *testing.T, run string) (repo string, m Machine) {
	t.Helper()
	if os.Getenv(EnvGate) == "" {
		t.Skip("set " + EnvGate + "=1 to run " + run)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	m.Kernel = filepath.Join(repo, "out", "guest", "bzImage")
	if env := os.Getenv(EnvKernel); env != "" {
		m.Kernel = env
	}
	m.QEMU, m.Firmware = QEMUFromEnv()
	if why := Missing(m.QEMU, m.Kernel); why != "" {
		t.Skip(why)
	}
	t.Logf("L1's emulator: %s (%s, firmware first from %q)", QEMUVersion(m.QEMU), m.QEMU, m.Firmware)
	return repo, m
}

// writeInitramfsFile writes files and the plan lines as dir/initramfs.cpio
// and returns its path.
func writeInitramfsFile(t *testing.T, dir string, files []File, lines []string) string {
	t.Helper()
	initramfs := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(initramfs)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteInitramfs(f, files, lines); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return initramfs
}

// checkSteps fails t for each step that failed in L1, and for a non-zero
// status that no step explains.
func checkSteps(t *testing.T, res Result) {
	t.Helper()
	for _, s := range res.Steps {
		if s.Status != 0 {
			t.Errorf("in L1: %q exited %d after %.1fs", s.Command, s.Status, s.Seconds)
		}
	}
	if res.Status != 0 && !t.Failed() {
		t.Errorf("L1 reported status %d", res.Status)
	}
}

// lineLogger streams L1's console into the test log, one line per write.
type lineLogger struct{ t *testing.T }

func (l lineLogger) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
