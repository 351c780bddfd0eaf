package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VM is one KVM virtual machine (a KVM_CREATE_VM fd).
type VM struct {
	fd      int
	sys     *System
	runSize int
}

// Close closes the VM fd. Close every vCPU first.
func (vm *VM) Close() error { return unix.Close(vm.fd) }

// System is the /dev/kvm handle this VM came from.
func (vm *VM) System() *System { return vm.sys }

// CheckExtension is KVM_CHECK_EXTENSION on the VM fd (per-VM answers).
func (vm *VM) CheckExtension(capability int) int {
	v, err := ioctlValue(vm.fd, ioctlCheckExtension, uintptr(capability))
	if err != nil {
		return 0
	}
	return v
}

// SetTSSAddr is KVM_SET_TSS_ADDR: three pages of guest physical address
// space that Intel VMX needs for real-mode emulation; must not be RAM the
// guest uses or MMIO.
func (vm *VM) SetTSSAddr(gpa uint64) error {
	if _, err := ioctlValue(vm.fd, ioctlSetTSSAddr, uintptr(gpa)); err != nil {
		return fmt.Errorf("KVM_SET_TSS_ADDR %#x: %w", gpa, err)
	}
	return nil
}

// SetIdentityMapAddr is KVM_SET_IDENTITY_MAP_ADDR: one page for the EPT
// identity map Intel uses for unpaged guest code.
func (vm *VM) SetIdentityMapAddr(gpa uint64) error {
	if _, err := ioctl(vm.fd, ioctlSetIdentityMapAddr, unsafe.Pointer(&gpa)); err != nil {
		return fmt.Errorf("KVM_SET_IDENTITY_MAP_ADDR %#x: %w", gpa, err)
	}
	return nil
}

// CreateIRQChip is KVM_CREATE_IRQCHIP: in-kernel PIC, IOAPIC and LAPICs,
// with the default GSI routing (GSI 0-15 to the PICs and IOAPIC, 16-23 to
// the IOAPIC).
func (vm *VM) CreateIRQChip() error {
	if _, err := ioctlValue(vm.fd, ioctlCreateIRQChip, 0); err != nil {
		return fmt.Errorf("KVM_CREATE_IRQCHIP: %w", err)
	}
	return nil
}

// CreatePIT2 is KVM_CREATE_PIT2: the in-kernel i8254 timer. Call after
// CreateIRQChip.
func (vm *VM) CreatePIT2() error {
	cfg := pitConfig{}
	if _, err := ioctl(vm.fd, ioctlCreatePIT2, unsafe.Pointer(&cfg)); err != nil {
		return fmt.Errorf("KVM_CREATE_PIT2: %w", err)
	}
	return nil
}

// Memory slot flags.
const (
	MemLogDirtyPages = 1 << 0
	MemReadonly      = 1 << 1
)

// SetUserMemoryRegion is KVM_SET_USER_MEMORY_REGION: host memory mem
// becomes guest RAM at gpa in slot. mem must be page-aligned (mmap'd) and
// stay mapped for the VM's life. An empty mem deletes the slot.
func (vm *VM) SetUserMemoryRegion(slot uint32, gpa uint64, mem []byte, flags uint32) error {
	r := UserspaceMemoryRegion{Slot: slot, Flags: flags, GuestPhysAddr: gpa, MemorySize: uint64(len(mem))}
	if len(mem) > 0 {
		r.UserspaceAddr = uint64(uintptr(unsafe.Pointer(&mem[0])))
	}
	if _, err := ioctl(vm.fd, ioctlSetUserMemoryRegion, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION slot %d at %#x (%d bytes): %w", slot, gpa, len(mem), err)
	}
	return nil
}

// IRQLine is KVM_IRQ_LINE: set the level of a GSI on the in-kernel irqchip.
func (vm *VM) IRQLine(gsi uint32, high bool) error {
	l := irqLevel{IRQ: gsi}
	if high {
		l.Level = 1
	}
	if _, err := ioctl(vm.fd, ioctlIRQLine, unsafe.Pointer(&l)); err != nil {
		return fmt.Errorf("KVM_IRQ_LINE %d: %w", gsi, err)
	}
	return nil
}

// SignalMSI is KVM_SIGNAL_MSI: inject one MSI directly. It returns
// whether the interrupt was delivered (false: the guest blocked it).
func (vm *VM) SignalMSI(addr uint64, data uint32) (bool, error) {
	m := msi{AddressLo: uint32(addr), AddressHi: uint32(addr >> 32), Data: data}
	r, err := ioctl(vm.fd, ioctlSignalMSI, unsafe.Pointer(&m))
	if err != nil {
		return false, fmt.Errorf("KVM_SIGNAL_MSI: %w", err)
	}
	return r > 0, nil
}
