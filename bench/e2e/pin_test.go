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
	p, err := newPinning(false)
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

func TestPinningApartGivesTheHarnessACPUOfItsOwn(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	p, err := newPinning(true)
	if all.Count() < 3 {
		if err == nil {
			t.Fatalf("newPinning(apart) accepted %d CPUs", all.Count())
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if p.harness.Count() != 1 || !p.harness.IsSet(p.harnessCPU) || p.rest.IsSet(p.harnessCPU) ||
		p.rest.IsSet(p.vcpuCPU) || p.harnessCPU == p.vcpuCPU || p.rest.Count() != all.Count()-2 {
		t.Fatalf("harness %v (CPU %d), rest %v, vcpu CPU %d, from %v", p.harness, p.harnessCPU, p.rest, p.vcpuCPU, all)
	}
	if *p.self() != p.harness {
		t.Errorf("the harness runs on %v, want %v", *p.self(), p.harness)
	}
}

func TestPlaceDeviceWithoutApartLeavesTheThread(t *testing.T) {
	var nilPin *pinning
	back, err := nilPin.placeDevice()
	if err != nil {
		t.Fatal(err)
	}
	back()
}
