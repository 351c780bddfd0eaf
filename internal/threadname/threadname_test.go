package threadname

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func comm(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

func TestSetNamesTheThreadAndRestoreGivesItsNameBack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := comm(t)
	restore := Set("vcpu0")
	if got := comm(t); got != "vcpu0" {
		t.Errorf("after Set: comm %q, want vcpu0", got)
	}
	restore()
	if got := comm(t); got != before {
		t.Errorf("after restore: comm %q, want %q", got, before)
	}
}

func TestSetKeepsTheFirst15Bytes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer Set("net-a-very-long-interface-name")()
	if got := comm(t); got != "net-a-very-long" {
		t.Errorf("comm %q, want the first 15 bytes", got)
	}
}

func TestSetWithANulLeavesTheName(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := comm(t)
	defer Set("bad\x00name")()
	if got := comm(t); got != before {
		t.Errorf("comm %q, want it unchanged (%q)", got, before)
	}
}
