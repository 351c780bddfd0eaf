package vmm

import "fmt"

// netDevice is one virtio-net device behind its virtio-pci transport.
type netDevice struct {
	stats func() any
	stop  func()
}

// attachNets creates the virtio-net devices and puts them behind
// virtio-pci transports on the buses.
func (m *machine) attachNets() error {
	if len(m.cfg.Nets) == 0 {
		return nil
	}
	return fmt.Errorf("--net: this build has no virtio-pci transport yet")
}

// stopNets stops every net device's workers before guest memory goes.
func (m *machine) stopNets() {
	for _, n := range m.nets {
		n.stop()
	}
}
