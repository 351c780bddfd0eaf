package kvm

import (
	"fmt"
	"unsafe"
)

// Ioeventfd describes one KVM_IOEVENTFD binding: a guest write of Len
// bytes to Addr (MMIO, or a port when PIO) signals the eventfd FD inside
// KVM, without an exit to the VMM. With Datamatch set, only writes of
// that value do.
type Ioeventfd struct {
	Addr      uint64
	Len       uint32 // 0 (any length, KVM_CAP_IOEVENTFD_ANY_LENGTH), 1, 2, 4 or 8
	FD        int
	PIO       bool
	Datamatch *uint64
}

func (e Ioeventfd) raw(deassign bool) ioeventfd {
	r := ioeventfd{Addr: e.Addr, Len: e.Len, FD: int32(e.FD)}
	if e.PIO {
		r.Flags |= ioeventfdFlagPIO
	}
	if e.Datamatch != nil {
		r.Flags |= ioeventfdFlagDatamatch
		r.Datamatch = *e.Datamatch
	}
	if deassign {
		r.Flags |= ioeventfdFlagDeassign
	}
	return r
}

// AddIoeventfd registers e with KVM_IOEVENTFD.
func (vm *VM) AddIoeventfd(e Ioeventfd) error {
	r := e.raw(false)
	if _, err := ioctl(vm.fd, ioctlIoeventfd, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_IOEVENTFD at %#x (len %d): %w", e.Addr, e.Len, err)
	}
	return nil
}

// RemoveIoeventfd removes a binding made with the same Ioeventfd.
func (vm *VM) RemoveIoeventfd(e Ioeventfd) error {
	r := e.raw(true)
	if _, err := ioctl(vm.fd, ioctlIoeventfd, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_IOEVENTFD deassign at %#x: %w", e.Addr, err)
	}
	return nil
}

// AssignIRQFD is KVM_IRQFD: signalling eventfd fd raises GSI gsi.
func (vm *VM) AssignIRQFD(fd int, gsi uint32) error {
	r := irqfd{FD: uint32(fd), GSI: gsi}
	if _, err := ioctl(vm.fd, ioctlIRQFD, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_IRQFD fd %d gsi %d: %w", fd, gsi, err)
	}
	return nil
}

// DeassignIRQFD undoes AssignIRQFD.
func (vm *VM) DeassignIRQFD(fd int, gsi uint32) error {
	r := irqfd{FD: uint32(fd), GSI: gsi, Flags: irqfdFlagDeassign}
	if _, err := ioctl(vm.fd, ioctlIRQFD, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("KVM_IRQFD deassign fd %d gsi %d: %w", fd, gsi, err)
	}
	return nil
}

// Route is one GSI routing table entry: either an MSI (MSIAddr, MSIData)
// or a pin of an in-kernel irqchip (Chip, Pin).
type Route struct {
	GSI     uint32
	MSI     bool
	MSIAddr uint64
	MSIData uint32
	Chip    uint32 // IRQChipPICMaster, IRQChipPICSlave, IRQChipIOAPIC
	Pin     uint32
}

// DefaultIRQChipRoutes is the table KVM_CREATE_IRQCHIP installs
// (kvm_setup_default_irq_routing): GSI 0-15 on IOAPIC pin N and on PIC pin
// N%8, GSI 16-23 on IOAPIC pin N. KVM_SET_GSI_ROUTING replaces the whole
// table, so MSI routes are added on top of these to keep legacy IRQs as
// they were.
func DefaultIRQChipRoutes() []Route {
	var rs []Route
	for gsi := uint32(0); gsi < 24; gsi++ {
		rs = append(rs, Route{GSI: gsi, Chip: IRQChipIOAPIC, Pin: gsi})
		if gsi < 8 {
			rs = append(rs, Route{GSI: gsi, Chip: IRQChipPICMaster, Pin: gsi})
		} else if gsi < 16 {
			rs = append(rs, Route{GSI: gsi, Chip: IRQChipPICSlave, Pin: gsi - 8})
		}
	}
	return rs
}

func (r Route) raw() irqRoutingEntry {
	e := irqRoutingEntry{GSI: r.GSI}
	if r.MSI {
		e.Type = irqRoutingMSI
		e.U[0] = uint32(r.MSIAddr)
		e.U[1] = uint32(r.MSIAddr >> 32)
		e.U[2] = r.MSIData
	} else {
		e.Type = irqRoutingIRQChip
		e.U[0] = r.Chip
		e.U[1] = r.Pin
	}
	return e
}

// SetGSIRouting is KVM_SET_GSI_ROUTING: it replaces the whole routing
// table with routes.
func (vm *VM) SetGSIRouting(routes []Route) error {
	buf := newFlex[irqRoutingHeader, irqRoutingEntry](len(routes))
	buf.header().Nr = uint32(len(routes))
	entries := buf.entries()
	for i, r := range routes {
		entries[i] = r.raw()
	}
	if _, err := ioctl(vm.fd, ioctlSetGSIRouting, buf.pointer()); err != nil {
		return fmt.Errorf("KVM_SET_GSI_ROUTING (%d routes): %w", len(routes), err)
	}
	return nil
}
