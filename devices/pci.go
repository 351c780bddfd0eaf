package devices

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// PCI configuration mechanism #1: the guest writes an address to port
// 0xCF8 (enable bit 31, bus 23:16, device 15:11, function 10:8, register
// 7:2) and then accesses the selected dword through ports 0xCFC-0xCFF.
const (
	PCIConfigAddressPort = 0xcf8
	PCIConfigPorts       = 8 // 0xCF8-0xCFF: register the PCIBus with this size

	pciMaxDevices = 32
	pciEnableBit  = 1 << 31
)

// The host bridge at bus 0, device 0: what Linux's pci_sanity_check looks
// for before it trusts configuration mechanism #1.
const (
	HostBridgeVendor = 0x8086
	HostBridgeDevice = 0x0d57
	pciClassBridge   = 0x060000 // bridge, host bridge
)

// PCIBus is PCI bus 0 behind configuration mechanism #1, with a host
// bridge as device 0 and up to 31 single-function devices after it. Every
// config access takes one lock, so the address latch and the devices'
// config spaces need no locks of their own. Register it on the port-I/O
// bus at PCIConfigAddressPort with size PCIConfigPorts.
type PCIBus struct {
	mu      sync.Mutex
	address uint32
	devs    [pciMaxDevices]*PCIConfig
	mmio    *Bus
}

// NewPCIBus returns bus 0 with its host bridge. BARs of the functions
// added later are mapped on mmio.
func NewPCIBus(mmio *Bus) *PCIBus {
	b := &PCIBus{mmio: mmio}
	b.devs[0] = NewPCIConfig(PCIHeader{VendorID: HostBridgeVendor, DeviceID: HostBridgeDevice, Class: pciClassBridge})
	return b
}

// Add puts a function in the next free slot, maps its BARs if memory
// decoding is on, and returns its device number.
func (b *PCIBus) Add(f *PCIConfig) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for slot := 1; slot < pciMaxDevices; slot++ {
		if b.devs[slot] == nil {
			b.devs[slot] = f
			f.mmio = b.mmio
			f.remap()
			return slot, nil
		}
	}
	return 0, fmt.Errorf("pci: bus 0 is full (%d devices)", pciMaxDevices-1)
}

// selected returns the function and register the address latch points at,
// or nil when it selects nothing (disabled, another bus, a function other
// than 0, an extended register, an empty slot).
func (b *PCIBus) selected() (*PCIConfig, uint64) {
	a := b.address
	bus, dev, fn, ext := (a>>16)&0xff, (a>>11)&0x1f, (a>>8)&0x7, (a>>24)&0xf
	// ext is the AMD extended register number (offsets 256-4095): these
	// functions have only the 256 bytes of conventional config space.
	if a&pciEnableBit == 0 || bus != 0 || fn != 0 || ext != 0 {
		return nil, 0
	}
	return b.devs[dev], uint64(a & 0xfc)
}

// Read implements BusDevice for ports 0xCF8-0xCFF.
func (b *PCIBus) Read(offset uint64, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case offset == 0 && len(data) == 4:
		binary.LittleEndian.PutUint32(data, b.address)
		return
	case offset >= 4 && offset+uint64(len(data)) <= 8:
		if f, reg := b.selected(); f != nil {
			f.ConfigRead(reg+offset-4, data)
			return
		}
	}
	for i := range data {
		data[i] = 0xff
	}
}

// Write implements BusDevice for ports 0xCF8-0xCFF. Only dword writes
// change the address latch (a byte write to 0xCFB is how Linux probes for
// mechanism #2, and must not).
func (b *PCIBus) Write(offset uint64, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case offset == 0 && len(data) == 4:
		b.address = binary.LittleEndian.Uint32(data) &^ 3
	case offset >= 4 && offset+uint64(len(data)) <= 8:
		if f, reg := b.selected(); f != nil {
			f.ConfigWrite(reg+offset-4, data)
		}
	}
}
