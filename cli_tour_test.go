package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tinyvmm/kvm"
)

func TestTourUsage(t *testing.T) {
	var out, errb strings.Builder
	if st := dispatch([]string{"tour", "--help"}, &out, &errb); st != 0 || !strings.Contains(out.String(), "Usage: tinyvmm tour") {
		t.Errorf("--help: status %d, stdout %q", st, out.String())
	}
	for _, args := range [][]string{{"tour", "extra"}, {"tour", "--nope"}} {
		out.Reset()
		errb.Reset()
		if st := dispatch(args, &out, &errb); st != exitUsage || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%q: status %d, stderr %q; want %d and one line", args, st, errb.String(), exitUsage)
		}
	}
}

// A page that cannot be written fails at once, in one line, before any
// boot.
func TestTourHTMLBadPath(t *testing.T) {
	var out, errb strings.Builder
	st := dispatch([]string{"tour", "--html", "/nonexistent-dir/tour.html"}, &out, &errb)
	if st != exitRuntime || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "/nonexistent-dir/tour.html") {
		t.Errorf("status %d, stderr %q; want %d and one line naming the file", st, errb.String(), exitRuntime)
	}
}

// Without a KVM that runs Linux user space, a tinyvmm with no lab command
// beside it says, in one line, how to run the tour nested; it neither
// needs nor looks for a source tree or a Go toolchain.
func TestTourWithoutKVMNamesTheLab(t *testing.T) {
	if h := kvm.Detect(); h.Usable && !h.PVM {
		t.Skip("this host's KVM runs the tour here")
	}
	bin := buildBinary(t) // alone in a scratch directory
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "tinyvmm-lab")); err == nil {
		t.Fatal("a tinyvmm-lab beside the test's tinyvmm")
	}
	cmd := exec.Command(bin, "tour", "--seeds=false")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH=/nonexistent") // no go to fall back on
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitRuntime {
		t.Fatalf("exit %v, want status %d; stderr %q", err, exitRuntime, stderr.String())
	}
	msg := stderr.String()
	if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "tinyvmm: tour: ") || !strings.Contains(msg, "tinyvmm-lab") || !strings.Contains(msg, "make build guest") {
		t.Errorf("stderr %q: want one line naming tinyvmm-lab and make build guest", msg)
	}
}
