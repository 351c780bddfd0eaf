// Package kvmstat reads KVM's counters of a VMM's VM, the same way for
// tinyvmm and QEMU: from debugfs, where KVM keeps a directory per VM,
// named PID-FD after the process that made it, whose files hold the VM's
// counters summed over its vCPUs (CONFIG_DEBUG_FS, which the L1 kernel
// has; l1init mounts debugfs). A VM's directory goes when the VM does, so
// a benchmark reads it while the VMM still runs. (KVM_GET_STATS_FD has
// the same numbers, but KVM answers a VM's ioctls only in the process
// that made it.) bench e2e and bench usernet read them per cell.
package kvmstat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DebugFS is where debugfs has KVM's directories.
const DebugFS = "/sys/kernel/debug/kvm"

// Names are the counters Read returns, in the order to show them, as
// KVM names them (arch/x86/kvm/x86.c): exits counts every VM exit; io_exits and mmio_exits those that went to
// the VMM in user space (a notify handled by an ioeventfd in the kernel is
// in exits only); halt_exits HLTs; irq_exits exits for the host's own
// interrupts (timer ticks included); irq_injections the interrupts KVM
// injected into the guest (MSI from an irqfd, timer, ...).
// signal_exits are a signal for the VMM's vCPU thread (a Go profiler's
// SIGPROF, a preemption), irq_window_exits the guest opening a window
// for an interrupt KVM holds.
var Names = []string{"exits", "io_exits", "mmio_exits", "halt_exits", "irq_exits", "irq_injections", "signal_exits", "irq_window_exits"}

// Detail are more of KVM's counters, which ReadDetail reads with Names
// where the kernel has them, for where a vCPU's time goes (all
// arch/x86/kvm/x86.c and virt/kvm/kvm_main.c): halt polling (the HLTs
// KVM polled after, those whose wakeup came while it polled, polls it
// cut short, the time spent in polls that saw a wakeup and in those that
// did not, and halt_wait_ns the time asleep after the poll); exits for a
// pending request (request_irq_exits) or an NMI window; instructions KVM
// decoded and emulated (insn_emulation: an MMIO access such as an xAPIC
// register's, a notify without an ioeventfd); guest page faults KVM fixed
// or emulated; TLB flushes; hypercalls (PV features); the host state and
// FPU reloaded around a return to user space or a switch of threads; and
// the steal-time preemption marks.
var Detail = []string{"halt_attempted_poll", "halt_successful_poll", "halt_poll_invalid", "halt_wakeup",
	"halt_poll_success_ns", "halt_poll_fail_ns", "halt_wait_ns", "request_irq_exits", "nmi_window_exits",
	"insn_emulation", "insn_emulation_fail", "pf_fixed", "pf_emulate", "pf_guest", "tlb_flush", "hypercalls",
	"host_state_reload", "fpu_reload", "req_event", "preemption_reported", "preemption_other"}

// Counts are named counter values, summed over a VM's vCPUs.
type Counts map[string]uint64

// Sub is c - before, per counter; a counter that went backwards (it
// cannot, unless the two come from different VMs) is an error.
func (c Counts) Sub(before Counts) (Counts, error) {
	d := Counts{}
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

// VM is one VM's directory in debugfs, with a counter file held open.
type VM struct {
	dir  string
	hold *os.File
}

// Open finds the directory of pid's VM under root (DebugFS),
// with proc as /proc. KVM names it after the thread that made the VM
// (task_pid_nr: a thread id, not the process id, in a Go VMM such as
// tinyvmm) and the VM's fd, so the name is matched against the process's
// threads and its "anon_inode:kvm-vm" fd.
func Open(root, proc string, pid int) (*VM, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("kvm stats: %v (a kernel without DEBUG_FS, or debugfs not mounted at /sys/kernel/debug)", err)
	}
	fds, err := ScanFDs(filepath.Join(proc, strconv.Itoa(pid), "fd"))
	if err != nil {
		return nil, fmt.Errorf("kvm stats: %w", err)
	}
	tasks, err := os.ReadDir(filepath.Join(proc, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, fmt.Errorf("kvm stats: %w", err)
	}
	names := map[string]bool{}
	for _, t := range tasks {
		for _, fd := range fds.VMs {
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
			pid, len(fds.VMs), len(tasks), len(dirs), root)
	}
	s := &VM{dir: filepath.Join(root, dirs[0])}
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

// Read returns Names (those the kernel has; exits it must have).
func (s *VM) Read() (Counts, error) {
	c := Counts{}
	for _, name := range Names {
		v, err := s.counter(name)
		if errors.Is(err, fs.ErrNotExist) && name != "exits" {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kvm stats: %w", err)
		}
		c[name] = v
	}
	return c, nil
}

// counter reads one counter of the VM: its file's single number.
func (s *VM) counter(name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// ReadDetail returns Names as Read does, and the Detail counters this
// kernel has: one it lacks, or whose file holds no single number, is left
// out.
func (s *VM) ReadDetail() (Counts, error) {
	c, err := s.Read()
	if err != nil {
		return nil, err
	}
	for _, name := range Detail {
		if v, err := s.counter(name); err == nil {
			c[name] = v
		}
	}
	return c, nil
}

// Close lets the VM go.
func (s *VM) Close() {
	if s.hold != nil {
		s.hold.Close()
		s.hold = nil
	}
}

// FDs is what a VMM process's file table says about KVM and io_uring.
type FDs struct {
	VMs      []int // fd numbers of its VMs
	VCPUs    []int // of its vCPUs
	IOURings int   // io_uring instances it holds open
}

// ScanFDs reads the links in dir (/proc/PID/fd): KVM names a VM's fd
// "anon_inode:kvm-vm", a vCPU's "anon_inode:kvm-vcpu:N", and an io_uring
// is "anon_inode:[io_uring]".
func ScanFDs(dir string) (FDs, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return FDs{}, err
	}
	var v FDs
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
			v.VMs = append(v.VMs, fd)
		case strings.HasPrefix(target, "anon_inode:kvm-vcpu:"):
			v.VCPUs = append(v.VCPUs, fd)
		case target == "anon_inode:[io_uring]":
			v.IOURings++
		}
	}
	return v, nil
}
