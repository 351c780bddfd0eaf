package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Pinning (--pin) gives the vCPU a CPU of its own, as a host tuned for
// VMs does (libvirt's vcpupin and emulatorpin): the harness and every
// VMM thread but the vCPU run on the other CPUs. Without it the scheduler
// may wake the harness's sink or sender, or a VMM's own thread, on the
// CPU where the vCPU runs its guest, and each such wakeup is an
// interrupt there: an exit of the guest that neither VMM's device caused
// (in a 2-CPU nested L1 they were most of the function-call interrupts on
// the vCPU's CPU). Both VMMs get the same placement. The ceiling's tap
// loop runs with the rest, where a VMM's device does: on the vCPU's CPU,
// or free to go there, its every write woke the sink on the other CPU with
// an interrupt, which cut its rate several times over.
type pinning struct {
	vcpu, rest unix.CPUSet
	vcpuCPU    int
}

// newPinning splits the CPUs this process may use: the last for the
// vCPU, the others for the rest. It needs two.
func newPinning() (*pinning, error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	if all.Count() < 2 {
		return nil, fmt.Errorf("--pin needs 2 CPUs, this process may use %d", all.Count())
	}
	p := &pinning{rest: all, vcpuCPU: -1}
	for c := len(all)*64 - 1; c >= 0; c-- {
		if all.IsSet(c) {
			p.vcpuCPU = c
			break
		}
	}
	p.vcpu.Set(p.vcpuCPU)
	p.rest.Clear(p.vcpuCPU)
	return p, nil
}

// String says where things run, for the report's header.
func (p *pinning) String() string {
	return fmt.Sprintf("the vCPU thread pinned to CPU %d, all other threads (harness, VMM) off it", p.vcpuCPU)
}

// pinSelf moves every thread of this process off the vCPU's CPU; threads
// made later inherit it, and so do the VMMs the harness starts.
func (p *pinning) pinSelf() error {
	return setThreads("/proc", os.Getpid(), &p.rest)
}

// pinVCPU moves the VMM pid's vCPU thread (vcpuThread, by its name)
// onto the vCPU's CPU. The wait is for a VMM whose vCPU has no such name:
// at the guest's ready line that thread may not have a clock tick of
// guest time yet.
func (p *pinning) pinVCPU(pid int) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		tid, _, err := vcpuThread("/proc", pid)
		switch {
		case err != nil:
			return err
		case tid > 0:
			return unix.SchedSetaffinity(tid, &p.vcpu)
		case time.Now().After(deadline):
			return errors.New("no thread has run the guest")
		}
		time.Sleep(time.Millisecond)
	}
}

// placeWorkers moves kernel workers that serve a VMM from outside its
// thread group (vhost-net's, vhostWorkers) to the CPUs of its other
// non-vCPU threads, as libvirt's emulatorpin does: left alone a kernel
// thread may run anywhere, the vCPU's CPU included.
func (p *pinning) placeWorkers(pids []int) error {
	for _, w := range pids {
		if err := unix.SchedSetaffinity(w, &p.rest); err != nil {
			return fmt.Errorf("sched_setaffinity %d: %w", w, err)
		}
	}
	return nil
}

// setThreads sets the affinity of each thread of pid.
func setThreads(proc string, pid int, set *unix.CPUSet) error {
	ents, err := os.ReadDir(filepath.Join(proc, strconv.Itoa(pid), "task"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("sched_setaffinity %d: %w", tid, err)
		}
	}
	return nil
}
