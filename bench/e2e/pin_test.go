package e2e

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPinningGivesTheVCPUOneCPUAndTheRestTheOthers(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &orig)
	p, err := newPinning()
	if orig.Count() < 2 {
		if err == nil {
			t.Fatal("newPinning accepted a single CPU")
		}
		t.Skipf("one CPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if p.vcpu.Count() != 1 || !p.vcpu.IsSet(p.vcpuCPU) || p.rest.IsSet(p.vcpuCPU) || p.rest.Count() != orig.Count()-1 {
		t.Fatalf("vcpu %v (CPU %d), rest %v, from %v", p.vcpu, p.vcpuCPU, p.rest, orig)
	}
	defer setThreads("/proc", os.Getpid(), &orig) // the other tests' threads too
	if err := p.pinSelf(); err != nil {
		t.Fatal(err)
	}
	var now unix.CPUSet
	unix.SchedGetaffinity(0, &now)
	if now != p.rest {
		t.Errorf("after pinSelf this thread may use %v, want %v", now, p.rest)
	}
}
