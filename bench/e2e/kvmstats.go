package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// KVM's counters of a VMM's VM, read the same way for tinyvmm and QEMU:
// from debugfs, where KVM keeps a directory per VM, named PID-FD after the
// process that made it, whose files hold the VM's counters summed over its
// vCPUs (CONFIG_DEBUG_FS, which the L1 kernel has; l1init mounts debugfs).
// A VM's directory goes when the VM does, so a run reads it while the VMM
// still runs. (KVM_GET_STATS_FD has the same numbers, but KVM answers a VM's
// ioctls only in the process that made it.)

// debugfsKVM is where debugfs has KVM's directories.
const debugfsKVM = "/sys/kernel/debug/kvm"

// The counters a run reports. KVM's names (arch/x86/kvm/x86.c):
// exits counts every VM exit; io_exits and mmio_exits those that went to
// the VMM in user space (a notify handled by an ioeventfd in the kernel is
// in exits only); halt_exits HLTs; irq_exits exits for the host's own
// interrupts (timer ticks included); irq_injections the interrupts KVM
// injected into the guest (MSI from an irqfd, timer, ...).
// signal_exits are a signal for the VMM's vCPU thread (a Go profiler's
// SIGPROF, a preemption), irq_window_exits the guest opening a window
// for an interrupt KVM holds.
var kvmCounters = []string{"exits", "io_exits", "mmio_exits", "halt_exits", "irq_exits", "irq_injections", "signal_exits", "irq_window_exits"}

// kvmCounts are named counter values, summed over a VM's vCPUs.
type kvmCounts map[string]uint64

// sub is c - before, per counter; a counter that went backwards (it
// cannot, unless the two come from different VMs) is an error.
func (c kvmCounts) sub(before kvmCounts) (kvmCounts, error) {
	d := kvmCounts{}
	for k, v := range c {
		b, ok := before[k]
		if !ok {
			continue
		}
		if v < b {
			return nil, fmt.Errorf("kvm stat %s went backwards: %d -> %d", k, b, v)
		}
		d[k] = v - b
	}
	return d, nil
}

// vmStats is one VM's directory in debugfs, with a counter file held open.
type vmStats struct {
	dir  string
	hold *os.File
}

// openVMStats finds the directory of pid's VM under root (debugfsKVM),
// with proc as /proc. KVM names it after the thread that made the VM
// (task_pid_nr: a thread id, not the process id, in a Go VMM such as
// tinyvmm) and the VM's fd, so the name is matched against the process's
// threads and its "anon_inode:kvm-vm" fd.
func openVMStats(root, proc string, pid int) (*vmStats, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("kvm stats: %v (a kernel without DEBUG_FS, or debugfs not mounted at /sys/kernel/debug)", err)
	}
	fds, err := scanFDs(filepath.Join(proc, strconv.Itoa(pid), "fd"))
	if err != nil {
		return nil, fmt.Errorf("kvm stats: %w", err)
	}
	tasks, err := os.ReadDir(filepath.Join(proc, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, fmt.Errorf("kvm stats: %w", err)
	}
	names := map[string]bool{}
	for _, t := range tasks {
		for _, fd := range fds.vms {
			names[t.Name()+"-"+strconv.Itoa(fd)] = true
		}
	}
	var dirs []string
	for _, e := range ents {
		if names[e.Name()] {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 1 {
		return nil, fmt.Errorf("kvm stats: process %d (%d VM fds, %d threads) has %d VMs in %s, want 1",
			pid, len(fds.vms), len(tasks), len(dirs), root)
	}
	s := &vmStats{dir: filepath.Join(root, dirs[0])}
	// An open counter file holds a reference to its VM
	// (kvm_debugfs_open): the VM, its directory and its counts then
	// outlive the VMM's exit until Close, so a run whose output is read
	// late (a loaded host) still gets them. The files cannot seek, so each
	// Read opens them again.
	if s.hold, err = os.Open(filepath.Join(s.dir, "exits")); err != nil {
		s.hold = nil
	}
	return s, nil
}

// Read returns kvmCounters (those the kernel has; exits it must have).
func (s *vmStats) Read() (kvmCounts, error) {
	c := kvmCounts{}
	for _, name := range kvmCounters {
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if os.IsNotExist(err) && name != "exits" {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kvm stats: %w", err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kvm stats: %s: %w", name, err)
		}
		c[name] = v
	}
	return c, nil
}

// Close lets the VM go.
func (s *vmStats) Close() {
	if s.hold != nil {
		s.hold.Close()
		s.hold = nil
	}
}

// vmFDs is what a VMM process's file table says about KVM and io_uring.
type vmFDs struct {
	vms      []int // fd numbers of its VMs
	vcpus    []int // of its vCPUs
	ioURings int   // io_uring instances it holds open
}

// scanFDs reads the links in dir (/proc/PID/fd): KVM names a VM's fd
// "anon_inode:kvm-vm", a vCPU's "anon_inode:kvm-vcpu:N", and an io_uring
// is "anon_inode:[io_uring]".
func scanFDs(dir string) (vmFDs, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return vmFDs{}, err
	}
	var v vmFDs
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case target == "anon_inode:kvm-vm":
			v.vms = append(v.vms, fd)
		case strings.HasPrefix(target, "anon_inode:kvm-vcpu:"):
			v.vcpus = append(v.vcpus, fd)
		case target == "anon_inode:[io_uring]":
			v.ioURings++
		}
	}
	return v, nil
}

// exitDetail turns a run's counter deltas into a sample's details: the raw
// counts as kvm_NAME and, per frame the guest moved, exits_per_frame,
// irqs_per_frame (interrupts KVM injected) and kicks_per_frame (the guest's
// own count of notify writes, the same guest code under both VMMs; each
// is one exit, to an ioeventfd or to the VMM). No frames, no ratios.
//
// exits_per_frame leaves out io_exits. The bench guest's loops do no port
// I/O (its notifies are MMIO); its only port I/O in the window is the
// serial console's result line, two exits a byte, which goes by before the
// harness reads the line's start and closes the window. How much of it
// goes by depends on how soon the harness gets a CPU, not on the VMM's
// datapath (1-CPU L1, 64 B tx: 212 port exits under tinyvmm, 24 under
// QEMU, in a window of ~670 and ~160).
func exitDetail(d kvmCounts, frames, kicks float64) map[string]float64 {
	m := map[string]float64{}
	for _, k := range kvmCounters {
		if v, ok := d[k]; ok {
			m["kvm_"+k] = float64(v)
		}
	}
	if frames <= 0 {
		return m
	}
	if v, ok := d["exits"]; ok {
		m["exits_per_frame"] = float64(v-min(v, d["io_exits"])) / frames
	}
	if v, ok := d["irq_injections"]; ok {
		m["irqs_per_frame"] = float64(v) / frames
	}
	m["kicks_per_frame"] = kicks / frames
	return m
}

// VMStats is KVM's counters of one VMM's VM, for other benchmarks (bench
// usernet reads them per cell).
type VMStats struct{ s *vmStats }

// OpenVMStats finds pid's VM in debugfs (see openVMStats).
func OpenVMStats(pid int) (*VMStats, error) {
	s, err := openVMStats(debugfsKVM, "/proc", pid)
	if err != nil {
		return nil, err
	}
	return &VMStats{s}, nil
}

// Read returns the VM's counters (kvmCounters, those the kernel has).
func (v *VMStats) Read() (map[string]uint64, error) { return v.s.Read() }

// Close lets the VM go.
func (v *VMStats) Close() { v.s.Close() }

// KVMCounters are the names Read returns, in the order to show them.
func KVMCounters() []string { return slices.Clone(kvmCounters) }
