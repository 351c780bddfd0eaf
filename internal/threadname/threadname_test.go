package threadname

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// comm is the calling thread's name, as Of reads it.
func comm(t *testing.T) string {
	t.Helper()
	name := Of(unix.Gettid())
	if name == "" {
		t.Fatal("no name read for the calling thread")
	}
	return name
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
