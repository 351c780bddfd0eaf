package pci

import "tinyvmm/virtio"

// MSIVector is one MSI-X vector, backed in the VMM by a GSI route and an irqfd.
type MSIVector interface {
	virtio.Interrupt
	// Update points the vector at a new MSI address/data pair, or masks it.
	Update(addr uint64, data uint32, masked bool) error
	Close() error
}

// Hypervisor is what the transport needs from KVM. The VMM (vmm/, which
// owns KVM) implements it; this package never imports kvm/, so the
// transport is testable without /dev/kvm.
type Hypervisor interface {
	// AddIoeventfd makes a guest write of any value to the MMIO address gpa
	// signal the eventfd fd inside KVM, without an exit to the VMM.
	AddIoeventfd(gpa uint64, size uint32, fd int) error
	RemoveIoeventfd(gpa uint64, size uint32, fd int) error
	// NewMSIVector allocates a GSI and an irqfd for one MSI-X vector.
	NewMSIVector() (MSIVector, error)
}
