package vmm

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"tinyvmm/kvm"
	"tinyvmm/virtio/pci"
)

// firstMSIGSI is the first GSI after the in-kernel IOAPIC's 24 pins.
const firstMSIGSI = 24

// hypervisor implements pci.Hypervisor on a KVM VM: ioeventfds, and
// MSI vectors as GSI routes plus irqfds. KVM_SET_GSI_ROUTING replaces the
// whole table, so it keeps every MSI route and re-sets the table (the
// default irqchip routes plus the MSI routes) on every change.
type hypervisor struct {
	vm irqVM

	mu      sync.Mutex
	routes  map[uint32]kvm.Route // live MSI routes by GSI
	used    map[uint32]bool
	nextGSI uint32
	maxGSI  uint32
}

// irqVM is the part of *kvm.VM the hypervisor uses (a fake in tests).
type irqVM interface {
	CheckExtension(capability int) int
	AddIoeventfd(e kvm.Ioeventfd) error
	RemoveIoeventfd(e kvm.Ioeventfd) error
	AssignIRQFD(fd int, gsi uint32) error
	DeassignIRQFD(fd int, gsi uint32) error
	SetGSIRouting(routes []kvm.Route) error
}

func newHypervisor(vm irqVM) *hypervisor {
	max := uint32(vm.CheckExtension(kvm.CapIRQRouting))
	if max == 0 {
		max = 1024
	}
	return &hypervisor{vm: vm, routes: map[uint32]kvm.Route{}, used: map[uint32]bool{}, nextGSI: firstMSIGSI, maxGSI: max}
}

// AddIoeventfd implements pci.Hypervisor.
func (h *hypervisor) AddIoeventfd(gpa uint64, size uint32, fd int) error {
	return h.vm.AddIoeventfd(kvm.Ioeventfd{Addr: gpa, Len: size, FD: fd})
}

// RemoveIoeventfd implements pci.Hypervisor.
func (h *hypervisor) RemoveIoeventfd(gpa uint64, size uint32, fd int) error {
	return h.vm.RemoveIoeventfd(kvm.Ioeventfd{Addr: gpa, Len: size, FD: fd})
}

// NewMSIVector implements pci.Hypervisor: a free GSI with an irqfd,
// masked and without a route until Update.
func (h *hypervisor) NewMSIVector() (pci.MSIVector, error) {
	h.mu.Lock()
	gsi, err := h.allocGSI()
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		h.freeGSI(gsi)
		return nil, fmt.Errorf("eventfd for MSI vector: %w", err)
	}
	if err := h.vm.AssignIRQFD(fd, gsi); err != nil {
		unix.Close(fd)
		h.freeGSI(gsi)
		return nil, err
	}
	return &msiVector{h: h, gsi: gsi, fd: fd, masked: true}, nil
}

func (h *hypervisor) allocGSI() (uint32, error) {
	for i := uint32(0); i < h.maxGSI; i++ {
		gsi := h.nextGSI
		h.nextGSI++
		if h.nextGSI >= h.maxGSI {
			h.nextGSI = firstMSIGSI
		}
		if !h.used[gsi] {
			h.used[gsi] = true
			return gsi, nil
		}
	}
	return 0, fmt.Errorf("no free GSI for an MSI vector (KVM allows %d)", h.maxGSI)
}

func (h *hypervisor) freeGSI(gsi uint32) {
	h.mu.Lock()
	delete(h.used, gsi)
	h.mu.Unlock()
}

// setRoute installs, changes or (with route nil) removes one MSI route
// and pushes the whole table to KVM if it changed. Called with h.mu held.
func (h *hypervisor) setRouteLocked(gsi uint32, route *kvm.Route) error {
	old, had := h.routes[gsi]
	switch {
	case route == nil && !had:
		return nil
	case route == nil:
		delete(h.routes, gsi)
	case had && old == *route:
		return nil
	default:
		h.routes[gsi] = *route
	}
	return h.vm.SetGSIRouting(h.tableLocked())
}

func (h *hypervisor) tableLocked() []kvm.Route {
	table := kvm.DefaultIRQChipRoutes()
	gsis := make([]uint32, 0, len(h.routes))
	for g := range h.routes {
		gsis = append(gsis, g)
	}
	sort.Slice(gsis, func(i, j int) bool { return gsis[i] < gsis[j] })
	for _, g := range gsis {
		table = append(table, h.routes[g])
	}
	return table
}

// msiVector is one MSI-X vector. While masked, a Trigger is remembered as
// pending and delivered at unmask, as the MSI-X pending bit does.
type msiVector struct {
	h   *hypervisor
	gsi uint32
	fd  int

	mu      sync.Mutex
	masked  bool
	pending bool
	closed  bool
}

// Trigger implements devices.Interrupt.
func (v *msiVector) Trigger() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.closed:
		return fmt.Errorf("MSI vector on GSI %d is closed", v.gsi)
	case v.masked:
		v.pending = true
		return nil
	}
	return signalEventfd(v.fd)
}

// Update implements pci.MSIVector.
func (v *msiVector) Update(addr uint64, data uint32, masked bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return fmt.Errorf("MSI vector on GSI %d is closed", v.gsi)
	}
	if !masked {
		v.h.mu.Lock()
		err := v.h.setRouteLocked(v.gsi, &kvm.Route{GSI: v.gsi, MSI: true, MSIAddr: addr, MSIData: data})
		v.h.mu.Unlock()
		if err != nil {
			return err
		}
	}
	v.masked = masked
	if !masked && v.pending {
		v.pending = false
		return signalEventfd(v.fd)
	}
	return nil
}

// Close implements pci.MSIVector.
func (v *msiVector) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	v.closed = true
	err := v.h.vm.DeassignIRQFD(v.fd, v.gsi)
	v.h.mu.Lock()
	if rerr := v.h.setRouteLocked(v.gsi, nil); err == nil {
		err = rerr
	}
	delete(v.h.used, v.gsi)
	v.h.mu.Unlock()
	unix.Close(v.fd)
	return err
}

// lineInterrupt raises a legacy ISA IRQ (the UART's) through an irqfd on
// its GSI: each Trigger is an edge on the in-kernel PIC and IOAPIC.
type lineInterrupt struct {
	fd int
}

func newLineInterrupt(vm irqVM, gsi uint32) (*lineInterrupt, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd for IRQ %d: %w", gsi, err)
	}
	if err := vm.AssignIRQFD(fd, gsi); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &lineInterrupt{fd: fd}, nil
}

// Trigger implements devices.Interrupt.
func (l *lineInterrupt) Trigger() error { return signalEventfd(l.fd) }

func (l *lineInterrupt) close(vm irqVM, gsi uint32) {
	vm.DeassignIRQFD(l.fd, gsi)
	unix.Close(l.fd)
}

// signalEventfd adds 1 to an eventfd. EAGAIN means the counter is already
// at its maximum, so the reader will wake anyway.
func signalEventfd(fd int) error {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	for {
		_, err := unix.Write(fd, one[:])
		switch err {
		case nil, unix.EAGAIN:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("signal eventfd: %w", err)
	}
}
