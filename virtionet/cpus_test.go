package virtionet

import (
	"runtime"
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

func TestDisjoint(t *testing.T) {
	if !disjoint(cpuSet(0), cpuSet(1)) || !disjoint(cpuSet(70), cpuSet(3, 69)) {
		t.Error("sets without a common CPU: not disjoint?")
	}
	if disjoint(cpuSet(0, 1), cpuSet(1)) || disjoint(cpuSet(70), cpuSet(70)) {
		t.Error("sets with a common CPU: disjoint?")
	}
}

// roomBeside reads real affinities: a thread on every CPU with one vCPU
// pinned to the last has a CPU of its own but is not apart; pinned off
// that CPU it is apart too; a thread it cannot read means neither.
func TestRoomBeside(t *testing.T) {
	vcpu := pinnedThread(t)
	if got := roomBeside([]int{vcpu}); got != (cpuRoom{own: true}) {
		t.Errorf("a thread on every CPU and a vCPU pinned to one: %+v, want own only", got)
	}
	if got := roomBeside(nil); got != (cpuRoom{}) {
		t.Errorf("no vCPUs known: %+v, want neither", got)
	}
	if got := roomBeside([]int{1 << 30}); got != (cpuRoom{}) {
		t.Errorf("a vCPU thread that does not exist: %+v, want neither", got)
	}
	var vs unix.CPUSet
	if err := unix.SchedGetaffinity(vcpu, &vs); err != nil {
		t.Fatal(err)
	}
	done := make(chan cpuRoom)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread ends with the goroutine
		var rest unix.CPUSet
		unix.SchedGetaffinity(0, &rest)
		for i := range rest {
			rest[i] &^= vs[i]
		}
		if unix.SchedSetaffinity(0, &rest) != nil {
			done <- cpuRoom{}
			return
		}
		done <- roomBeside([]int{vcpu})
	}()
	if got := <-done; got != (cpuRoom{own: true, apart: true}) {
		t.Errorf("a thread pinned off the vCPU's CPU: %+v, want own and apart", got)
	}
}
