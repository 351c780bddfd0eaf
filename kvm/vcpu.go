package kvm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrInterrupted is returned by Run after Interrupt was called.
var ErrInterrupted = errors.New("vCPU interrupted")

// VCPU is one virtual CPU. Run and the register calls must come from the
// goroutine that owns it, locked to its OS thread (runtime.LockOSThread);
// Interrupt may come from anywhere.
type VCPU struct {
	fd          int
	id          int
	run         []byte // the mmap'd struct kvm_run
	tid         atomic.Int32
	interrupted atomic.Bool

	mu     sync.Mutex // Close against Interrupt: no store into an unmapped kvm_run
	closed bool
}

// CreateVCPU is KVM_CREATE_VCPU with APIC ID id, and maps its kvm_run.
func (vm *VM) CreateVCPU(id int) (*VCPU, error) {
	fd, err := ioctlValue(vm.fd, ioctlCreateVCPU, uintptr(id))
	if err != nil {
		return nil, fmt.Errorf("KVM_CREATE_VCPU %d: %w", id, err)
	}
	unix.CloseOnExec(fd)
	run, err := unix.Mmap(fd, 0, vm.runSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap kvm_run of vCPU %d: %w", id, err)
	}
	return &VCPU{fd: fd, id: id, run: run}, nil
}

// ID is the vCPU's APIC ID.
func (v *VCPU) ID() int { return v.id }

// Close unmaps kvm_run and closes the vCPU fd. The vCPU must not be
// running; Interrupt after Close does nothing.
func (v *VCPU) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	v.closed = true
	v.interrupted.Store(true)
	err := unix.Munmap(v.run)
	if cerr := unix.Close(v.fd); err == nil {
		err = cerr
	}
	return err
}

// Thread is the id of the thread that runs the vCPU (Run locks it to one),
// 0 before its first Run.
func (v *VCPU) Thread() int { return int(v.tid.Load()) }

// Run enters the guest until an exit that needs the VMM. It retries EINTR
// (Go's preemption signals) and returns ErrInterrupted once Interrupt was
// called. After it returns, the exit accessors below decode the exit.
func (v *VCPU) Run() (ExitReason, error) {
	if v.tid.Load() == 0 {
		v.tid.Store(int32(unix.Gettid()))
	}
	for {
		if v.interrupted.Load() {
			return ExitIntr, ErrInterrupted
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(v.fd), ioctlRun, 0)
		switch e {
		case 0:
			return decoder(v.run).reason(), nil
		case unix.EINTR, unix.EAGAIN:
			continue
		default:
			return ExitUnknown, fmt.Errorf("KVM_RUN on vCPU %d: %w", v.id, e)
		}
	}
}

// Interrupt makes Run return ErrInterrupted, now or at its next call. It
// sets kvm_run.immediate_exit (so a racing KVM_RUN returns at once) and
// sends SIGURG to the vCPU's thread to knock it out of the guest; Go's
// runtime treats SIGURG as a harmless preemption request.
func (v *VCPU) Interrupt() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	v.interrupted.Store(true)
	v.run[runImmediateExit] = 1 // a plain store: the kernel reads it at KVM_RUN entry
	if tid := v.tid.Load(); tid != 0 {
		unix.Tgkill(unix.Getpid(), int(tid), unix.SIGURG)
	}
}

// Exit decoding, valid after Run returned that reason.

// IO decodes a KVM_EXIT_IO.
func (v *VCPU) IO() IOExit { return decoder(v.run).io() }

// MMIO decodes a KVM_EXIT_MMIO.
func (v *VCPU) MMIO() MMIOExit { return decoder(v.run).mmio() }

// SystemEvent decodes a KVM_EXIT_SYSTEM_EVENT.
func (v *VCPU) SystemEvent() SystemEvent { return decoder(v.run).systemEvent() }

// InternalError decodes a KVM_EXIT_INTERNAL_ERROR.
func (v *VCPU) InternalError() InternalError { return decoder(v.run).internalError() }

// FailEntry decodes a KVM_EXIT_FAIL_ENTRY.
func (v *VCPU) FailEntry() FailEntry { return decoder(v.run).failEntry() }

// Registers and state.

// Regs is KVM_GET_REGS.
func (v *VCPU) Regs() (Regs, error) {
	var r Regs
	if _, err := ioctl(v.fd, ioctlGetRegs, unsafe.Pointer(&r)); err != nil {
		return r, fmt.Errorf("KVM_GET_REGS: %w", err)
	}
	return r, nil
}

// SetRegs is KVM_SET_REGS.
func (v *VCPU) SetRegs(r Regs) error {
	if _, err := ioctl(v.fd, ioctlSetRegs, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %w", err)
	}
	return nil
}

// Sregs is KVM_GET_SREGS.
func (v *VCPU) Sregs() (Sregs, error) {
	var s Sregs
	if _, err := ioctl(v.fd, ioctlGetSregs, unsafe.Pointer(&s)); err != nil {
		return s, fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	return s, nil
}

// SetSregs is KVM_SET_SREGS.
func (v *VCPU) SetSregs(s Sregs) error {
	if _, err := ioctl(v.fd, ioctlSetSregs, unsafe.Pointer(&s)); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	return nil
}

// FPU is KVM_GET_FPU.
func (v *VCPU) FPU() (FPU, error) {
	var f FPU
	if _, err := ioctl(v.fd, ioctlGetFPU, unsafe.Pointer(&f)); err != nil {
		return f, fmt.Errorf("KVM_GET_FPU: %w", err)
	}
	return f, nil
}

// SetFPU is KVM_SET_FPU.
func (v *VCPU) SetFPU(f FPU) error {
	if _, err := ioctl(v.fd, ioctlSetFPU, unsafe.Pointer(&f)); err != nil {
		return fmt.Errorf("KVM_SET_FPU: %w", err)
	}
	return nil
}

// SetCPUID is KVM_SET_CPUID2.
func (v *VCPU) SetCPUID(entries []CPUIDEntry) error {
	buf := newFlex[cpuid2Header, CPUIDEntry](len(entries))
	buf.header().Nent = uint32(len(entries))
	copy(buf.entries(), entries)
	if _, err := ioctl(v.fd, ioctlSetCPUID2, buf.pointer()); err != nil {
		return fmt.Errorf("KVM_SET_CPUID2 (%d entries): %w", len(entries), err)
	}
	return nil
}

// CPUID is KVM_GET_CPUID2: the table set with SetCPUID. Linux (6.1 at
// least) copies nent back to user space on neither success nor E2BIG, so
// the only signal is E2BIG when nent is below the count: find the smallest
// nent that succeeds.
func (v *VCPU) CPUID() ([]CPUIDEntry, error) {
	fits := func(n int) (bool, error) {
		buf := newFlex[cpuid2Header, CPUIDEntry](n)
		buf.header().Nent = uint32(n)
		_, err := ioctl(v.fd, ioctlGetCPUID2, buf.pointer())
		switch {
		case err == nil:
			return true, nil
		case err == unix.E2BIG:
			return false, nil
		}
		return false, fmt.Errorf("KVM_GET_CPUID2: %w", err)
	}
	hi := 64
	for {
		ok, err := fits(hi)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if hi >= 4096 {
			return nil, fmt.Errorf("KVM_GET_CPUID2: more than 4096 entries")
		}
		hi *= 2
	}
	lo := 0 // invariant: fits(hi), and lo == 0 or !fits(lo)
	for lo+1 < hi {
		mid := (lo + hi) / 2
		ok, err := fits(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	if ok, _ := fits(0); ok {
		return nil, nil // no CPUID set
	}
	buf := newFlex[cpuid2Header, CPUIDEntry](hi)
	buf.header().Nent = uint32(hi)
	if _, err := ioctl(v.fd, ioctlGetCPUID2, buf.pointer()); err != nil {
		return nil, fmt.Errorf("KVM_GET_CPUID2: %w", err)
	}
	return append([]CPUIDEntry(nil), buf.entries()...), nil
}

// SetMSRs is KVM_SET_MSRS; it fails unless every entry was set.
func (v *VCPU) SetMSRs(entries []MSREntry) error {
	buf := newFlex[msrsHeader, MSREntry](len(entries))
	buf.header().NMSRs = uint32(len(entries))
	copy(buf.entries(), entries)
	n, err := ioctl(v.fd, ioctlSetMSRs, buf.pointer())
	if err != nil {
		return fmt.Errorf("KVM_SET_MSRS: %w", err)
	}
	if n != len(entries) {
		return fmt.Errorf("KVM_SET_MSRS: KVM refused MSR %#x (set %d of %d)", entries[n].Index, n, len(entries))
	}
	return nil
}

// MSRs is KVM_GET_MSRS for the given indices.
func (v *VCPU) MSRs(indices ...uint32) ([]MSREntry, error) {
	buf := newFlex[msrsHeader, MSREntry](len(indices))
	buf.header().NMSRs = uint32(len(indices))
	for i, idx := range indices {
		buf.entries()[i].Index = idx
	}
	n, err := ioctl(v.fd, ioctlGetMSRs, buf.pointer())
	if err != nil {
		return nil, fmt.Errorf("KVM_GET_MSRS: %w", err)
	}
	if n != len(indices) {
		return nil, fmt.Errorf("KVM_GET_MSRS: KVM cannot read MSR %#x", indices[n])
	}
	return append([]MSREntry(nil), buf.entries()...), nil
}

// LAPIC is KVM_GET_LAPIC.
func (v *VCPU) LAPIC() (LAPICState, error) {
	var l LAPICState
	if _, err := ioctl(v.fd, ioctlGetLAPIC, unsafe.Pointer(&l)); err != nil {
		return l, fmt.Errorf("KVM_GET_LAPIC: %w", err)
	}
	return l, nil
}

// SetLAPIC is KVM_SET_LAPIC.
func (v *VCPU) SetLAPIC(l LAPICState) error {
	if _, err := ioctl(v.fd, ioctlSetLAPIC, unsafe.Pointer(&l)); err != nil {
		return fmt.Errorf("KVM_SET_LAPIC: %w", err)
	}
	return nil
}

// MPState is KVM_GET_MP_STATE.
func (v *VCPU) MPState() (uint32, error) {
	var s MPState
	if _, err := ioctl(v.fd, ioctlGetMPState, unsafe.Pointer(&s)); err != nil {
		return 0, fmt.Errorf("KVM_GET_MP_STATE: %w", err)
	}
	return s.State, nil
}

// SetMPState is KVM_SET_MP_STATE.
func (v *VCPU) SetMPState(state uint32) error {
	s := MPState{State: state}
	if _, err := ioctl(v.fd, ioctlSetMPState, unsafe.Pointer(&s)); err != nil {
		return fmt.Errorf("KVM_SET_MP_STATE: %w", err)
	}
	return nil
}
