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
//
// With apart (--pin-apart, 3 CPUs or more) the harness (its senders,
// sink and pinger, the Linux cells' host-side tools) gets the first CPU
// to itself too, and the VMMs' other threads, vhost's workers and the
// ceiling's tap loop the CPUs between. A device's thread is then never
// woken by switching away from the harness's address space on its own
// CPU: a kernel thread such as vhost's borrows whatever address space
// was there, a user-space worker must switch, and in a nested L1 under
// TCG that switch flushes the emulator's TLB (switchcost.go). It is the
// A/B for what those switches cost a VMM, not the placement.
type pinning struct {
	vcpu, rest unix.CPUSet
	vcpuCPU    int
	// harness is the harness's own CPU with apart (harnessCPU), empty
	// without (harnessCPU -1).
	harness    unix.CPUSet
	harnessCPU int
}

// newPinning splits the CPUs this process may use: the last for the
// vCPU, the others for the rest (with apart, the first for the harness
// and those between for the rest). It needs two CPUs, three with apart.
func newPinning(apart bool) (*pinning, error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	need := 2
	if apart {
		need = 3
	}
	if all.Count() < need {
		return nil, fmt.Errorf("needs %d CPUs, this process may use %d", need, all.Count())
	}
	var cpus []int
	for c := 0; c < len(all)*64; c++ {
		if all.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	p := &pinning{rest: all, vcpuCPU: cpus[len(cpus)-1], harnessCPU: -1}
	p.vcpu.Set(p.vcpuCPU)
	p.rest.Clear(p.vcpuCPU)
	if apart {
		p.harnessCPU = cpus[0]
		p.harness.Set(p.harnessCPU)
		p.rest.Clear(p.harnessCPU)
	}
	return p, nil
}

// String says where things run, for the report's header.
func (p *pinning) String() string {
	if p.harnessCPU >= 0 {
		return fmt.Sprintf("the vCPU thread pinned to CPU %d, the harness to CPU %d, the VMMs' other threads between", p.vcpuCPU, p.harnessCPU)
	}
	return fmt.Sprintf("the vCPU thread pinned to CPU %d, all other threads (harness, VMM) off it", p.vcpuCPU)
}

// self is where the harness runs.
func (p *pinning) self() *unix.CPUSet {
	if p.harnessCPU >= 0 {
		return &p.harness
	}
	return &p.rest
}

// pinSelf moves every thread of this process off the vCPU's CPU (with
// apart, onto the harness's); threads made later inherit it, and so do
// the VMMs the harness starts until pinVCPU moves them.
func (p *pinning) pinSelf() error {
	return setThreads("/proc", os.Getpid(), p.self())
}

// placeDevice moves the calling (locked) thread, which stands for a VMM's
// device (the ceiling's tap loop), to the VMMs' CPUs until back puts it
// with the harness again; nil-safe, and a no-op without apart.
func (p *pinning) placeDevice() (back func(), err error) {
	if p == nil || p.harnessCPU < 0 {
		return func() {}, nil
	}
	if err := unix.SchedSetaffinity(0, &p.rest); err != nil {
		return nil, fmt.Errorf("place the ceiling's tap loop: %w", err)
	}
	return func() { unix.SchedSetaffinity(0, &p.harness) }, nil
}

// pinVCPU moves the VMM pid's vCPU thread (vcpuThread, by its name)
// onto the vCPU's CPU, and with apart its other threads off the
// harness's. The wait is for a VMM whose vCPU has no such name: at the
// guest's ready line that thread may not have a clock tick of guest time
// yet.
func (p *pinning) pinVCPU(pid int) error {
	if p.harnessCPU >= 0 {
		if err := setThreads("/proc", pid, &p.rest); err != nil {
			return err
		}
	}
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
