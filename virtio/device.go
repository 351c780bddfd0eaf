// Package virtio is what every virtio device shares, whatever its
// transport: the split virtqueue (virtio 1.2, section 2.7) with its
// guest-memory helpers, the device status and transport feature bits, and
// the contract between a device model and its transport.
//
// The transport lives beneath it (virtio/pci); the devices (virtionet/,
// virtiofs/) import only this package. Nothing here imports kvm/: what a
// device needs from KVM (interrupts, kick eventfds) reaches it through the
// Activation, so every device is testable without /dev/kvm
// (virtio/virtiotest is a driver in Go that plays the guest).
package virtio

// Device status bits (virtio 1.2, 2.1).
const (
	StatusAcknowledge = 1
	StatusDriver      = 2
	StatusDriverOK    = 4
	StatusFeaturesOK  = 8
	StatusNeedsReset  = 0x40
	StatusFailed      = 0x80
)

// Transport feature bits.
const (
	FeatureIndirectDesc = 1 << 28 // VIRTIO_RING_F_INDIRECT_DESC
	FeatureEventIdx     = 1 << 29 // VIRTIO_RING_F_EVENT_IDX
	FeatureVersion1     = 1 << 32 // VIRTIO_F_VERSION_1
)

// Interrupt raises one guest interrupt. It is safe to call from any
// goroutine: in the VMM it writes an irqfd, in tests it counts.
type Interrupt interface {
	Trigger() error
}

// Device is a virtio device model (net, fs, ...) behind a transport.
type Device interface {
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
