package schedstat

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadRunNs reads the run time out of schedstat files, and 0 out of
// files that have none.
func TestReadRunNs(t *testing.T) {
	dir := t.TempDir()
	for in, want := range map[string]uint64{
		"123456 789 10\n": 123456,
		"42 7":            42,
		"42":              0,
		"":                0,
		"\n":              0,
		"x 1 2":           0,
	} {
		path := filepath.Join(dir, "schedstat")
		if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := read(path); got != want {
			t.Errorf("read(%q) = %d, want %d", in, got, want)
		}
	}
	if got := read(filepath.Join(dir, "none")); got != 0 {
		t.Errorf("read of a missing file = %d, want 0", got)
	}
}

// TestThreadCPUGrows spins on a locked thread and checks that its CPU time
// moves, and that a thread that does not exist reads as 0.
func TestThreadCPUGrows(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no schedstat in /proc:", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	before := ThreadCPU(tid)
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
	}
	after := ThreadCPU(tid)
	if after <= before {
		t.Errorf("CPU time of a spinning thread did not grow: %d then %d", before, after)
	}
	if got := ThreadCPU(-1); got != 0 {
		t.Errorf("ThreadCPU(-1) = %d, want 0", got)
	}
}
