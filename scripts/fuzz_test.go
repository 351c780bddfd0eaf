package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGo stands in for go test: it records its arguments, prints $FAKE_OUT,
// creates $FAKE_NEW when set (a reproducer being written) and exits with
// $FAKE_STATUS.
const fakeGo = `#!/bin/sh
echo "$@" > "$FAKE_ARGS"
printf '%s' "$FAKE_OUT"
[ -n "$FAKE_NEW" ] && mkdir -p "$(dirname "$FAKE_NEW")" && : > "$FAKE_NEW"
exit "$FAKE_STATUS"
`

const (
	fuzzLine     = "fuzz: elapsed: 15s, execs: 20000 (0/sec), new interesting: 0 (total: 3)\n"
	deadlineRace = fuzzLine + "--- FAIL: FuzzX (15.01s)\n    context deadline exceeded\nFAIL\nexit status 1\nFAIL\tm/pkg\t15.1s\n"
	reproducer   = fuzzLine + "--- FAIL: FuzzX (0.02s)\n    --- FAIL: FuzzX (0.00s)\n        x_test.go:3: boom\n    \n" +
		"    Failing input written to testdata/fuzz/FuzzX/d026589b590bd8d3\n    To re-run:\n    go test -run=FuzzX/d026589b590bd8d3\nFAIL\nexit status 1\nFAIL\tm/pkg\t0.018s\n"
)

// scripts/fuzz.sh passes the count budget (or $FUZZTIME) to go test, fails
// on any failure but Go's fuzzing deadline race (go.dev/issue/75804), and
// forgives that race only when no reproducer was written and nothing else
// was reported.
func TestFuzzScript(t *testing.T) {
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(dir, "pkg")
	corpus := filepath.Join(pkg, "testdata", "fuzz", "FuzzX")
	if err := os.MkdirAll(corpus, 0o755); err != nil {
		t.Fatal(err)
	}
	// A reproducer committed earlier is a seed, not a new finding.
	if err := os.WriteFile(filepath.Join(corpus, "594bb9e9498a2b47"), []byte("go test fuzz v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		fuzztime string // $FUZZTIME, "" for the count
		out      string
		status   int
		newFile  string
		want     int
		wantTime string
	}{
		{name: "pass", out: fuzzLine + "PASS\nok  \tm/pkg\t15.0s\n", want: 0, wantTime: "20000x"},
		{name: "soak pass", fuzztime: "5m", out: fuzzLine + "PASS\n", want: 0, wantTime: "5m"},
		{name: "deadline race", fuzztime: "5m", out: deadlineRace, status: 1, want: 0, wantTime: "5m"},
		{name: "deadline race and a reproducer", fuzztime: "5m", out: deadlineRace, status: 1, newFile: "0011223344556677", want: 1},
		{name: "deadline race and a panic", fuzztime: "5m", out: strings.Replace(deadlineRace, "FAIL\n", "panic: boom\nFAIL\n", 1), status: 1, want: 1},
		{name: "a reproducer", out: reproducer, status: 1, newFile: "d026589b590bd8d3", want: 1},
		{name: "a deadline as the target's own error", out: strings.Replace(reproducer, "boom", "context deadline exceeded", 1), status: 1, want: 1},
		{name: "build failure", out: "# m/pkg\npkg/x.go:1:1: syntax error\nFAIL\tm/pkg [build failed]\n", status: 1, want: 1},
		{name: "no such target", out: "testing: warning: no fuzz tests to fuzz\nPASS\nok  \tm/pkg\t0.003s\n", want: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := filepath.Join(t.TempDir(), "args")
			cmd := exec.Command("bash", "fuzz.sh", pkg, "FuzzX", "20000x")
			cmd.Env = append(os.Environ(), "GO="+goBin, "FUZZTIME="+c.fuzztime, "FAKE_ARGS="+args,
				"FAKE_OUT="+c.out, "FAKE_STATUS="+string(rune('0'+c.status)), "FAKE_NEW=")
			if c.newFile != "" {
				newFile := filepath.Join(corpus, c.newFile)
				cmd.Env = append(cmd.Env, "FAKE_NEW="+newFile)
				defer os.Remove(newFile)
			}
			out, err := cmd.CombinedOutput()
			status := 0
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != c.want {
				t.Errorf("exit status %d, want %d; output:\n%s", status, c.want, out)
			}
			got, err := os.ReadFile(args)
			if err != nil {
				t.Fatal(err)
			}
			want := "test -run=^$ -fuzz=^FuzzX$ -fuzztime=" + c.wantTime + " " + pkg
			if c.wantTime != "" && strings.TrimSpace(string(got)) != want {
				t.Errorf("go %s, want go %s", strings.TrimSpace(string(got)), want)
			}
		})
	}
}
