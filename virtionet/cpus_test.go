package virtionet

import (
	"testing"

	"golang.org/x/sys/unix"
)

func cpuSet(cpus ...int) unix.CPUSet {
	var s unix.CPUSet
	for _, c := range cpus {
		s.Set(c)
	}
	return s
}

func TestHasFreeCPU(t *testing.T) {
	for _, c := range []struct {
		name        string
		self, vcpus unix.CPUSet
		n           int
		want        bool
	}{
		{"pinned apart", cpuSet(0), cpuSet(1), 1, true},
		{"one CPU for both", cpuSet(0), cpuSet(0), 1, false},
		{"two CPUs, one vCPU", cpuSet(0, 1), cpuSet(0, 1), 1, true},
		{"two CPUs, two vCPUs", cpuSet(0, 1), cpuSet(0, 1), 2, false},
		{"a CPU the vCPUs may not use", cpuSet(0, 1), cpuSet(0), 2, true},
		{"high CPU numbers", cpuSet(70), cpuSet(3, 69), 2, true},
	} {
		if got := hasFreeCPU(c.self, c.vcpus, c.n); got != c.want {
			t.Errorf("%s: hasFreeCPU = %v, want %v", c.name, got, c.want)
		}
	}
}

// cpuOfItsOwn reads real affinities: a worker on every CPU with one vCPU
// pinned to the last has room; a thread it cannot read means no.
func TestCPUOfItsOwn(t *testing.T) {
	vcpu := pinnedThread(t)
	if !cpuOfItsOwn([]int{vcpu}) {
		t.Error("a thread on every CPU and a vCPU pinned to one: no CPU of its own?")
	}
	if cpuOfItsOwn(nil) {
		t.Error("no vCPUs known: want false")
	}
	if cpuOfItsOwn([]int{1 << 30}) {
		t.Error("a vCPU thread that does not exist: want false")
	}
}
