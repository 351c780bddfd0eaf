package devices

// This file holds the contracts between the device models, the VMM that
// hosts them (vmm/, which owns KVM) and the virtio devices (virtionet/).
// devices/ never imports kvm/: what it needs from KVM comes through the
// interfaces below, so every device is testable without /dev/kvm.

// Interrupt raises one guest interrupt. It is safe to call from any
// goroutine: in the VMM it writes an irqfd, in tests it counts.
type Interrupt interface {
	Trigger() error
}

// MSIVector is one MSI-X vector, backed in the VMM by a GSI route and an irqfd.
type MSIVector interface {
	Interrupt
	// Update points the vector at a new MSI address/data pair, or masks it.
	Update(addr uint64, data uint32, masked bool) error
	Close() error
}

// Hypervisor is what the virtio-pci transport needs from KVM.
type Hypervisor interface {
	// AddIoeventfd makes a guest write of any value to the MMIO address gpa
	// signal the eventfd fd inside KVM, without an exit to the VMM.
	AddIoeventfd(gpa uint64, size uint32, fd int) error
	RemoveIoeventfd(gpa uint64, size uint32, fd int) error
	// NewMSIVector allocates a GSI and an irqfd for one MSI-X vector.
	NewMSIVector() (MSIVector, error)
}

// VirtioDevice is a virtio device model (net, ...) behind a transport.
type VirtioDevice interface {
	// Type is the virtio device ID (1 for net).
	Type() uint16
	// Features are the device features offered, VIRTIO_F_VERSION_1 included.
	Features() uint64
	// QueueMaxSizes gives the maximum size of each virtqueue.
	QueueMaxSizes() []uint16
	// ReadConfig and WriteConfig access the device-specific config space.
	ReadConfig(offset uint64, data []byte)
	WriteConfig(offset uint64, data []byte)
	// Activate starts the device once the driver set DRIVER_OK.
	Activate(a Activation) error
	// Reset stops the device's workers and forgets its queues. It returns
	// only when no worker touches guest memory any more.
	Reset()
}

// Activation is everything a device gets when the driver sets DRIVER_OK.
type Activation struct {
	Mem      Memory
	Features uint64 // what the driver acked
	Queues   []*Queue
	// Kicks holds one eventfd per queue. The transport owns them (KVM
	// signals them through ioeventfd, or the transport writes them in
	// --notify=exit mode); the device only reads them.
	Kicks []int
	// Interrupts holds the interrupt of each queue, nil where the driver
	// set no vector.
	Interrupts []Interrupt
	// Config is the config-change interrupt, nil where unset.
	Config Interrupt
	// Fail reports that the guest broke the device (a hostile descriptor
	// chain, an impossible index). The transport sets DEVICE_NEEDS_RESET
	// and raises the config interrupt; it logs once per device.
	Fail func(err error)
}
