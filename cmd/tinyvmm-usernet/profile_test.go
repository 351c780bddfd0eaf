package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Each SIGUSR1 ends a profile file and starts the next, with a line of
// GC counters for each.
func TestProfileFilePerSignal(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "p")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); profile(prefix, stop) }()
	waitFile := func(name string) {
		t.Helper()
		for i := 0; i < 500; i++ {
			if _, err := os.Stat(name); err == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no %s", name)
	}
	waitFile(prefix + ".1")
	for _, next := range []string{".2", ".3"} {
		syscall.Kill(os.Getpid(), syscall.SIGUSR1)
		waitFile(prefix + next)
	}
	close(stop)
	<-done
	gc, err := os.ReadFile(prefix + ".gc")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(gc)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[2], "file 3: gc ") || !strings.Contains(lines[2], "minflt") {
		t.Errorf("gc lines %q", lines)
	}
	if fi, err := os.Stat(prefix + ".2"); err != nil || fi.Size() == 0 {
		t.Errorf("profile file 2: %v, %v", fi, err)
	}
}
