// Package userproctest builds the user network's child program for tests
// of packages that start it (userproc's own, usernetd's benchmarks): a
// test binary has no tinyvmm-usernet next to it.
package userproctest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	err  error
)

// Program is the child's name; userproc looks for it on PATH.
const Program = "tinyvmm-usernet"

// WithChild builds tinyvmm-usernet once per test binary (as make build
// does: no cgo) and puts it first on PATH for the test; it skips the
// test when the build fails (no Go toolchain).
func WithChild(tb testing.TB) {
	tb.Helper()
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "userproc-test-"); err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, Program), "tinyvmm/cmd/tinyvmm-usernet")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, e := cmd.CombinedOutput(); e != nil {
			err = errors.New(string(out))
		}
	})
	if err != nil {
		tb.Skipf("cannot build %s: %v", Program, err)
	}
	tb.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Cleanup removes the build; a TestMain calls it after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
