package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tinyvmm/test/nested"
)

// build builds the lab command into a scratch directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tinyvmm-lab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestErrors runs the lab on bad input: one tinyvmm-lab: line (or the
// usage), status 2, before anything runs; no stack trace.
func TestErrors(t *testing.T) {
	bin := build(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage: tinyvmm-lab bench e2e"},
		{"unknown command", []string{"fly"}, `unknown command "fly"`},
		{"unknown benchmark", []string{"bench", "fly"}, `unknown benchmark "fly"`},
		{"bench device is tinyvmm's", []string{"bench", "device"}, "tinyvmm bench device"},
		{"bench e2e bad flag", []string{"bench", "e2e", "--bogus"}, "unknown flag --bogus; see tinyvmm-lab bench e2e --help"},
		{"bench e2e runs 0", []string{"bench", "e2e", "--runs", "0", "--secs", "1", "--budget", "1ms"}, "--runs 0"},
		{"bench e2e apart without pin", []string{"bench", "e2e", "--pin-apart"}, "--pin-apart goes with --pin"},
		{"bench e2e unknown cell", []string{"bench", "e2e", "--only", "rx64,rx99", "--budget", "1ms"}, `--only: no cell "rx99"`},
		{"bench boot bad flag", []string{"bench", "boot", "--bogus"}, "unknown flag --bogus; see tinyvmm-lab bench boot --help"},
		{"bench share runs 0", []string{"bench", "share", "--runs", "0"}, "--size, --files, --qemu-files, --runs and --cpus must be at least 1"},
		{"bench usernet not user", []string{"bench", "usernet", "--net", "tap=t0"}, "for a user network"},
		{"nested smp 0", []string{"nested", "-repo", ".", "-smp", "0"}, "-smp 0: want 1..64 CPUs"},
		{"nested bad flag", []string{"nested", "-bogus"}, "flag provided but not defined: -bogus"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			cmd.Dir = t.TempDir()
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != exitUsage {
				t.Fatalf("exit %v, want status %d; stderr %q", err, exitUsage, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, c.want) {
				t.Errorf("stderr %q lacks %q", msg, c.want)
			}
			if strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
				t.Errorf("stack trace on stderr: %q", msg)
			}
			if len(c.args) > 0 && c.args[0] == "bench" {
				if lines := strings.Split(strings.TrimSpace(msg), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "tinyvmm-lab: ") {
					t.Errorf("stderr is not one tinyvmm-lab: line: %q", msg)
				}
			}
		})
	}
}

func TestHelp(t *testing.T) {
	bin := build(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"tinyvmm-lab bench e2e", "tinyvmm-lab bench boot", "tinyvmm-lab bench share", "tinyvmm-lab bench usernet", "tinyvmm-lab nested"}},
		{[]string{"bench", "e2e", "--help"}, []string{"Usage: tinyvmm-lab bench e2e", "-runs"}},
		{[]string{"bench", "boot", "--help"}, []string{"Usage: tinyvmm-lab bench boot", "-runs", "-tinyvmm"}},
		{[]string{"nested", "--help"}, []string{"Usage: tinyvmm-lab nested", "-lab", "-with-qemu", "-probe-exits"}},
	} {
		out, err := exec.Command(bin, c.args...).Output()
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
		}
		for i, line := range strings.Split(string(out), "\n") {
			if len(line) > 80 && c.args[0] != "nested" { // nested's flags are the flag package's
				t.Errorf("%q line %d is %d characters: %q", c.args, i+1, len(line), line)
			}
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%q: stdout lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

// The nested runner finds the repository from the working directory,
// from any directory inside it, and not elsewhere.
func TestFindRepo(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(root, "bench", "e2e"))
	if got := findRepo(); got != root {
		t.Errorf("from bench/e2e: %q, want %q", got, root)
	}
	t.Chdir(t.TempDir())
	self, _ := os.Executable()
	if got := findRepo(); got != "" && !strings.HasPrefix(self, got) {
		t.Errorf("from a scratch directory: %q", got)
	}
}

// fakeQEMU puts a qemu-system-x86_64 first in PATH that prints console
// as L1 would, and names it as L1's emulator (over a QEMU unpacked in the
// user's cache), and returns a kernel file for -kernel.
func fakeQEMU(t *testing.T, console string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\ncat <<'EOF'\n" + console + "EOF\n"
	bin := filepath.Join(dir, "qemu-system-x86_64")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(nested.EnvQEMU, bin)
	t.Setenv(nested.EnvFirmware, "")
	kernel := filepath.Join(dir, "bzImage")
	if err := os.WriteFile(kernel, []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return kernel
}

// With -log, stdout carries only what the plan's steps printed and stderr
// one line naming the log; L1's boot and the runner's own lines are in the
// log. When a step fails, stderr has the log's last lines too. Builds L1's
// tools: skipped with -short.
func TestNestedLogKeepsRunnerNoiseOut(t *testing.T) {
	if testing.Short() {
		t.Skip("builds L1's tools")
	}
	bin := build(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	boot := "[    0.000000] Linux version 6.1\nl1init: kernel reached init after 3.2 s\nl1init: /dev/kvm present\n" +
		"nested: L1 lost an interrupt: CPU#0 vector 236\n" +
		"NESTED-OUT 2 packets transmitted, 2 received\n" +
		"[   12.345678] tap0: entered promiscuous mode\n"
	for _, c := range []struct {
		name   string
		status int
		end    string
	}{
		{"pass", 0, "NESTED-STEP status=0 seconds=4.0 cmd=/repo/tinyvmm run -- sh -c ping\nNESTED-EXIT 0\n"},
		{"fail", exitRuntime, "NESTED-STEP status=1 seconds=4.0 cmd=/repo/tinyvmm run -- sh -c ping\nNESTED-EXIT 1\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			kernel := fakeQEMU(t, boot+c.end)
			logName := filepath.Join(t.TempDir(), "sub", "run.log")
			cmd := exec.Command(bin, "nested", "-repo", repo, "-kernel", kernel, "-probe-exits", "0", "-log", logName, "--", "run", "--", "true")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != c.status {
				t.Fatalf("exit %v, want %d; stderr:\n%s", err, c.status, stderr.String())
			}
			if got, want := stdout.String(), "2 packets transmitted, 2 received\n"; got != want {
				t.Errorf("stdout %q, want only the step's output %q", got, want)
			}
			log, err := os.ReadFile(logName)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"nested: building l1init", "Linux version", "lost an interrupt", "promiscuous", "NESTED-EXIT"} {
				if !strings.Contains(string(log), want) {
					t.Errorf("the log lacks %q:\n%s", want, log)
				}
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.HasSuffix(last, logName) {
				t.Errorf("stderr's last line %q does not name the log %s", last, logName)
			}
			if c.status == 0 && len(lines) != 1 {
				t.Errorf("a passing run printed %d lines on stderr, want 1:\n%s", len(lines), stderr.String())
			}
			if c.status != 0 && (!strings.Contains(stderr.String(), "NESTED-EXIT 1") || !strings.Contains(last, "FAIL")) {
				t.Errorf("a failed run's stderr lacks the log's tail or FAIL:\n%s", stderr.String())
			}
		})
	}
}
