package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// In L1 (test/nested runs this package there) the root is a mount over
// the initial ramfs, so a process may make a user namespace, as passt
// does to sandbox itself; on the ramfs itself the kernel counts every
// process as chrooted and says EPERM. Elsewhere there is nothing to see.
func TestL1RootTakesUserNamespaces(t *testing.T) {
	if os.Getenv("TINYVMM_NESTED_L1") != "1" {
		t.Skip("not in the nested L1")
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/" && f[0] == f[1] {
			t.Errorf("/ is the initial ramfs: %s", line)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("a child in a user namespace of its own: %v %s", err, out)
	}
}
