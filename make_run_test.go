package main

import (
	"os"
	"os/exec"
	"regexp"
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

// make run-nested gives L1 the README's addresses (a tap at 10.0.2.1) and
// runs CMD as a shell line, so the README's examples answer there too; a
// real run is `make run-nested CMD='ping -c 2 10.0.2.1 && echo ok'`.
func TestMakeRunNestedMatchesTheREADME(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	out, err := exec.Command("make", "-n", "--no-print-directory", "run-nested", "CMD=ping -c 2 10.0.2.1 && echo ok").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run-nested: %v\n%s", err, out)
	}
	for _, want := range []string{"l1init.tap=tap0,10.0.2.1/24", "--net tap=tap0", "ip=10.0.2.15::10.0.2.1:", `sh -c "$TINYVMM_NESTED_CMD"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make run-nested lacks %q:\n%s", want, out)
		}
	}
}

// make run-nested keeps the runner's and L1's lines in a log, and FILES
// go into L1 (-file) and on into the guest (--share . in L1's /files, where
// the command runs); without FILES nothing is shared.
func TestMakeRunNestedFilesAndLog(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	dry := func(args ...string) string {
		out, err := exec.Command("make", append([]string{"-n", "--no-print-directory", "run-nested", "NESTED_LOG=" + t.TempDir() + "/n.log"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run-nested %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	with := dry("FILES=testdata/a bin", "CMD=./a")
	for _, want := range []string{"-log ", "/n.log", "-file testdata/a -file bin", "--share . -- sh -c"} {
		if !strings.Contains(with, want) {
			t.Errorf("make run-nested FILES=... lacks %q:\n%s", want, with)
		}
	}
	if without := dry(); strings.Contains(without, "--share") || strings.Contains(without, "-file") {
		t.Errorf("make run-nested without FILES shares or adds files:\n%s", without)
	}
}

// The README documents make run-nested's FILES and where the rest of the
// output goes, as the Makefile has them, and stays within 200 lines.
func TestREADMEDocumentsRunNested(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 200 {
		t.Errorf("README.md has %d lines, over 200", n)
	}
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^NESTED_LOG \?= (\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no NESTED_LOG")
	}
	for _, want := range []string{"make run-nested CMD=", "FILES=", "`" + string(m[1]) + "`"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not mention %q", want)
		}
	}
}

// When make run-nested's build fails, the build's output went to the log:
// its end is printed and nothing boots.
func TestMakeRunNestedShowsAFailedBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	log := t.TempDir() + "/n.log"
	out, err := exec.Command("make", "--no-print-directory", "run-nested", "GO=false", "NESTED_LOG="+log).CombinedOutput()
	if err == nil {
		t.Fatalf("make run-nested with a failing build succeeded:\n%s", out)
	}
	// The runner's own lines start with "nested:"; make's first line may
	// say "run-nested: building the guest kernel first" on a fresh checkout.
	if !strings.Contains(string(out), "CGO_ENABLED=0 false build") || regexp.MustCompile(`(?m)^nested:`).Match(out) {
		t.Errorf("want the failed build's lines and no nested run:\n%s", out)
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "CGO_ENABLED=0 false build") {
		t.Errorf("the log lacks the build's lines:\n%s", b)
	}
}
