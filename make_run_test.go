package main

import (
	"os/exec"
	"strings"
	"testing"
)

// Without /dev/kvm, `make run` says so in one line and builds and creates
// nothing: no namespace, no tap (issue 25's first-hour finding).
func TestMakeRunWithoutKVMSaysOneLine(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	netns := func() string {
		out, _ := exec.Command("ip", "netns", "list").Output()
		return string(out)
	}
	before := netns()
	out, err := exec.Command("make", "--no-print-directory", "run", "KVM=/nonexistent/kvm").CombinedOutput()
	if err == nil {
		t.Fatalf("make run without a KVM device succeeded:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("make run printed %d lines, want 1:\n%s", len(lines), out)
	}
	for _, want := range []string{"/nonexistent/kvm", "make run-nested"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the line %q does not mention %q", lines[0], want)
		}
	}
	if after := netns(); after != before {
		t.Errorf("make run created namespaces: before %q, after %q", before, after)
	}
}
