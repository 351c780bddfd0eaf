// Package devices holds the PC's own devices that tinyvmm emulates and the
// buses they sit on: the port-I/O and MMIO buses, the PCI host bridge with
// its configuration mechanism (0xcf8/0xcfc) and the PCI config space that
// every PCI function uses, the 16550A serial port, the i8042 keyboard
// controller (only its reset line) and tinyvmm's exit device at port 0x501.
//
// Virtio lives elsewhere: the virtqueue in virtio/, its PCI transport in
// virtio/pci. What a guest stop means for the VM (its exit status, the
// message) is the VMM's policy, in vmm/; the devices here only report it.
//
// Nothing here imports kvm/: a device gets its interrupt as an Interrupt
// and its accesses through a Bus, so every device is testable without
// /dev/kvm.
package devices

// Interrupt raises one guest interrupt. It is safe to call from any
// goroutine: in the VMM it writes an irqfd, in tests it counts.
type Interrupt interface {
	Trigger() error
}
