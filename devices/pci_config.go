package devices

import (
	"encoding/binary"
	"fmt"
)

// PCI configuration space header (type 0) offsets and bits.
const (
	PCIVendorID      = 0x00
	PCIDeviceID      = 0x02
	PCICommand       = 0x04
	PCIStatus        = 0x06
	PCIRevision      = 0x08
	PCIClassProg     = 0x09
	PCIHeaderType    = 0x0e
	PCIBAR0          = 0x10
	PCISubsysVendor  = 0x2c
	PCISubsysID      = 0x2e
	PCICapPtr        = 0x34
	PCIInterruptLine = 0x3c
	PCIInterruptPin  = 0x3d

	PCICommandIO     = 1 << 0
	PCICommandMemory = 1 << 1
	PCICommandMaster = 1 << 2
	PCICommandNoINTx = 1 << 10

	PCIStatusCapList = 1 << 4

	PCIConfigSize = 256
	pciCapStart   = 0x40
	pciNumBARs    = 6
)

// PCIHeader holds the identity of a PCI function.
type PCIHeader struct {
	VendorID, DeviceID uint16
	Revision           uint8
	Class              uint32 // 24 bits: base class, subclass, programming interface
	SubsysVendorID     uint16
	SubsysID           uint16
}

// PCIBAR is one 64-bit memory BAR: size bytes (a power of two, at least 16)
// of MMIO decoded by Dev while the BAR is mapped.
type PCIBAR struct {
	Size     uint64
	Prefetch bool
	Dev      BusDevice
	// Moved, when set, is told each time the BAR gets mapped at addr or
	// unmapped (mapped false), after the MMIO bus was updated; the owner
	// moves what else hangs on the address (ioeventfds).
	Moved func(addr uint64, mapped bool)
}

type pciBAR struct {
	PCIBAR
	index  int    // the low register; the high one is index+1
	addr   uint64 // as programmed (all-ones while being sized)
	mapped uint64 // where it is registered on the MMIO bus
	isMap  bool
}

// PCIConfig is the configuration space of one PCI function: the type 0
// header, its 64-bit memory BARs, and a capability list. It implements
// sizing (all-ones writes read back the size mask) and moving BARs: while
// memory decoding is on, a BAR is registered on the MMIO bus at its
// programmed address. It is not safe for concurrent use; the PCIBus
// serializes all config accesses.
type PCIConfig struct {
	space [PCIConfigSize]byte
	wmask [PCIConfigSize]byte // bits the guest may change (BARs aside)
	bars  [pciNumBARs]*pciBAR // a 64-bit BAR at i also occupies i+1
	mmio  *Bus
	// OnWrite, when set, is called after each guest write that touched a
	// capability (offsets from 0x40), with the access offset and size.
	OnWrite func(offset uint8, size int)
	// OnRead, when set, is called before each guest read that touches a
	// capability, so the owner can refresh bytes there (through Bytes).
	OnRead  func(offset uint8, size int)
	lastCap uint8
	capLens [PCIConfigSize]uint8
	// Errorf reports BAR mapping failures (an overlap on the MMIO bus).
	Errorf func(format string, args ...any)
}

// NewPCIConfig returns a config space with h's identity, no BARs, no
// capabilities, memory decoding off and no INTx pin.
func NewPCIConfig(h PCIHeader) *PCIConfig {
	c := &PCIConfig{Errorf: func(string, ...any) {}}
	s := c.space[:]
	binary.LittleEndian.PutUint16(s[PCIVendorID:], h.VendorID)
	binary.LittleEndian.PutUint16(s[PCIDeviceID:], h.DeviceID)
	s[PCIRevision] = h.Revision
	s[PCIClassProg] = byte(h.Class)
	s[PCIClassProg+1] = byte(h.Class >> 8)
	s[PCIClassProg+2] = byte(h.Class >> 16)
	binary.LittleEndian.PutUint16(s[PCISubsysVendor:], h.SubsysVendorID)
	binary.LittleEndian.PutUint16(s[PCISubsysID:], h.SubsysID)
	binary.LittleEndian.PutUint16(c.wmask[PCICommand:], PCICommandMemory|PCICommandMaster|PCICommandNoINTx)
	c.wmask[PCIInterruptLine] = 0xff
	return c
}

// AddBAR64 declares a 64-bit memory BAR at index i (which also takes i+1),
// pre-assigned at addr as firmware would. Call it before the function is
// added to a bus.
func (c *PCIConfig) AddBAR64(i int, addr uint64, b PCIBAR) error {
	switch {
	case i < 0 || i+1 >= pciNumBARs:
		return fmt.Errorf("pci: BAR index %d out of range for a 64-bit BAR", i)
	case c.bars[i] != nil || c.bars[i+1] != nil:
		return fmt.Errorf("pci: BAR %d already in use", i)
	case b.Size < 16 || b.Size&(b.Size-1) != 0:
		return fmt.Errorf("pci: BAR size %#x is not a power of two of at least 16", b.Size)
	case addr&(b.Size-1) != 0:
		return fmt.Errorf("pci: BAR address %#x is not aligned to its size %#x", addr, b.Size)
	case b.Dev == nil:
		return fmt.Errorf("pci: BAR %d has no device", i)
	}
	bar := &pciBAR{PCIBAR: b, addr: addr, index: i}
	c.bars[i], c.bars[i+1] = bar, bar
	return nil
}

// SetMemoryEnabled sets the command register's memory-decode bit, as
// firmware does after assigning BARs.
func (c *PCIConfig) SetMemoryEnabled(on bool) {
	cmd := binary.LittleEndian.Uint16(c.space[PCICommand:])
	if on {
		cmd |= PCICommandMemory
	} else {
		cmd &^= PCICommandMemory
	}
	binary.LittleEndian.PutUint16(c.space[PCICommand:], cmd)
	c.remap()
}

// AddCapability appends a capability with the given ID; body is what
// follows the ID and next-pointer bytes. It returns the capability's
// offset; writable is a mask over body (nil: read-only).
func (c *PCIConfig) AddCapability(id uint8, body, writable []byte) (uint8, error) {
	off := uint8(pciCapStart)
	if c.lastCap != 0 {
		prevLen := int(c.capLen(c.lastCap))
		off = uint8((int(c.lastCap) + prevLen + 3) &^ 3)
	}
	end := int(off) + 2 + len(body)
	if off < pciCapStart || end > PCIConfigSize {
		return 0, fmt.Errorf("pci: capability %#x does not fit in config space", id)
	}
	c.space[off] = id
	c.space[off+1] = 0
	copy(c.space[off+2:], body)
	copy(c.wmask[off+2:], writable)
	if c.lastCap == 0 {
		c.space[PCICapPtr] = off
		binary.LittleEndian.PutUint16(c.space[PCIStatus:], binary.LittleEndian.Uint16(c.space[PCIStatus:])|PCIStatusCapList)
	} else {
		c.space[c.lastCap+1] = off
	}
	c.lastCap = off
	c.capLens[off] = uint8(2 + len(body))
	return off, nil
}

func (c *PCIConfig) capLen(off uint8) uint8 { return c.capLens[off] }

// Bytes returns n bytes of config space at off, aliasing it: the
// function's owner reads what the guest wrote into its capabilities and
// may update read-only bytes there.
func (c *PCIConfig) Bytes(off, n int) []byte { return c.space[off : off+n] }

// MemoryEnabled reports the command register's memory-decode bit.
func (c *PCIConfig) MemoryEnabled() bool {
	return binary.LittleEndian.Uint16(c.space[PCICommand:])&PCICommandMemory != 0
}

// BARAddr returns the programmed address of BAR i.
func (c *PCIConfig) BARAddr(i int) uint64 {
	if i < 0 || i >= pciNumBARs || c.bars[i] == nil {
		return 0
	}
	return c.bars[i].addr
}

// ConfigRead reads config space at offset (1, 2 or 4 bytes, not crossing
// the dword). Reads outside the 256 bytes return all ones.
func (c *PCIConfig) ConfigRead(offset uint64, data []byte) {
	if c.OnRead != nil && offset < PCIConfigSize && offset+uint64(len(data)) > pciCapStart {
		c.OnRead(uint8(offset), len(data))
	}
	for i := range data {
		o := offset + uint64(i)
		if o >= PCIConfigSize {
			data[i] = 0xff
			continue
		}
		data[i] = c.readByte(int(o))
	}
}

func (c *PCIConfig) readByte(o int) byte {
	if o >= PCIBAR0 && o < PCIBAR0+4*pciNumBARs {
		i := (o - PCIBAR0) / 4
		var dw uint32
		if b := c.bars[i]; b != nil {
			dw = c.barDword(i)
		}
		return byte(dw >> (8 * (o % 4)))
	}
	return c.space[o]
}

// barDword is the value the guest reads from BAR register i: the address
// bits above the size (which is how an all-ones write reads back as the
// size mask) and, in the low half, the type bits.
func (c *PCIConfig) barDword(i int) uint32 {
	b := c.bars[i]
	v := b.addr &^ (b.Size - 1)
	if i == b.index {
		low := uint32(v) | 0x4 // memory, 64-bit
		if b.Prefetch {
			low |= 0x8
		}
		return low
	}
	return uint32(v >> 32)
}

// ConfigWrite writes config space at offset through the write masks, and
// applies BAR and command changes to the MMIO bus.
func (c *PCIConfig) ConfigWrite(offset uint64, data []byte) {
	if offset >= PCIConfigSize || offset+uint64(len(data)) > PCIConfigSize {
		return
	}
	o := int(offset)
	if o >= PCIBAR0 && o < PCIBAR0+4*pciNumBARs {
		c.writeBAR(o, data)
		return
	}
	for i, v := range data {
		m := c.wmask[o+i]
		c.space[o+i] = c.space[o+i]&^m | v&m
	}
	if o <= PCICommand+1 && o+len(data) > PCICommand {
		c.remap()
	}
	if o+len(data) > pciCapStart && c.OnWrite != nil {
		c.OnWrite(uint8(o), len(data))
	}
}

func (c *PCIConfig) writeBAR(o int, data []byte) {
	i := (o - PCIBAR0) / 4
	b := c.bars[i]
	if b == nil {
		return
	}
	dw := c.barDword(i)
	for k, v := range data {
		shift := 8 * ((o + k) % 4)
		dw = dw&^(0xff<<shift) | uint32(v)<<shift
	}
	if i != b.index {
		b.addr = b.addr&0xffffffff | uint64(dw)<<32
	} else {
		b.addr = b.addr&^0xffffffff | uint64(dw&^0xf)
	}
	b.addr &^= b.Size - 1
	c.remap()
}

// remap registers every BAR at its programmed address while memory
// decoding is on, and unregisters it otherwise.
func (c *PCIConfig) remap() {
	if c.mmio == nil {
		return
	}
	on := c.MemoryEnabled()
	for i, b := range c.bars {
		if b == nil || i != b.index {
			continue
		}
		want := on && b.addr != 0 && b.addr+b.Size > b.addr
		if b.isMap && (!want || b.mapped != b.addr) {
			if err := c.mmio.Unregister(b.mapped); err != nil {
				c.Errorf("pci: unmapping BAR %d at %#x: %v", i, b.mapped, err)
			}
			b.isMap = false
			if b.Moved != nil {
				b.Moved(b.mapped, false)
			}
		}
		if want && !b.isMap {
			if err := c.mmio.Register(b.addr, b.Size, b.Dev); err != nil {
				c.Errorf("pci: BAR %d at %#x: %v (left unmapped)", i, b.addr, err)
				continue
			}
			b.isMap, b.mapped = true, b.addr
			if b.Moved != nil {
				b.Moved(b.addr, true)
			}
		}
	}
}
