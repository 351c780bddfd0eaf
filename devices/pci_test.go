package devices

import (
	"encoding/binary"
	"testing"
)

// cfg drives a PCIBus the way a guest does through ports 0xCF8/0xCFC.
type cfg struct {
	t *testing.T
	b *PCIBus
}

func (c cfg) addr(dev, reg int) uint32 { return pciEnableBit | uint32(dev)<<11 | uint32(reg)&0xfc }

func (c cfg) read(dev, reg, size int) uint32 {
	var a [4]byte
	binary.LittleEndian.PutUint32(a[:], c.addr(dev, reg))
	c.b.Write(0, a[:])
	data := make([]byte, size)
	c.b.Read(4+uint64(reg&3), data)
	var v [4]byte
	copy(v[:], data)
	return binary.LittleEndian.Uint32(v[:])
}

func (c cfg) write(dev, reg, size int, v uint32) {
	var a [4]byte
	binary.LittleEndian.PutUint32(a[:], c.addr(dev, reg))
	c.b.Write(0, a[:])
	var d [4]byte
	binary.LittleEndian.PutUint32(d[:], v)
	c.b.Write(4+uint64(reg&3), d[:size])
}

type recordingDev struct{ reads, writes []uint64 }

func (r *recordingDev) Read(off uint64, data []byte) {
	r.reads = append(r.reads, off)
	for i := range data {
		data[i] = 0xab
	}
}
func (r *recordingDev) Write(off uint64, data []byte) { r.writes = append(r.writes, off) }

func TestPCIHostBridgeAndLatch(t *testing.T) {
	b := NewPCIBus(NewMMIOBus())
	c := cfg{t, b}
	if v := c.read(0, 0, 4); v != HostBridgeDevice<<16|HostBridgeVendor {
		t.Fatalf("00:00.0 id = %#x", v)
	}
	if v := c.read(0, 0x08, 4) >> 8; v != pciClassBridge {
		t.Fatalf("host bridge class = %#x", v)
	}
	// The latch reads back, as Linux's pci_check_type1 requires.
	var a [4]byte
	binary.LittleEndian.PutUint32(a[:], 0x80000000)
	b.Write(0, a[:])
	b.Read(0, a[:])
	if binary.LittleEndian.Uint32(a[:]) != 0x80000000 {
		t.Fatalf("latch reads %#x", a)
	}
	// A byte write to 0xCFB (the mechanism #2 probe) leaves it alone.
	b.Write(3, []byte{1})
	b.Read(0, a[:])
	if binary.LittleEndian.Uint32(a[:]) != 0x80000000 {
		t.Fatalf("byte write to 0xCFB changed the latch to %#x", a)
	}
	if v := c.read(5, 0, 4); v != 0xffffffff {
		t.Fatalf("empty slot reads %#x, want all ones", v)
	}
	if v := c.read(0, 0, 2); v != HostBridgeVendor {
		t.Fatalf("16-bit vendor read = %#x", v)
	}
	if v := c.read(0, 2, 2); v != HostBridgeDevice {
		t.Fatalf("16-bit device read at offset 2 = %#x", v)
	}
	// Disabled latch, another bus, another function, an extended
	// register: nothing there.
	for _, addr := range []uint32{0x00000000, pciEnableBit | 1<<16, pciEnableBit | 1<<8, pciEnableBit | 1<<24} {
		binary.LittleEndian.PutUint32(a[:], addr)
		b.Write(0, a[:])
		b.Read(4, a[:])
		if binary.LittleEndian.Uint32(a[:]) != 0xffffffff {
			t.Fatalf("address %#x reads %#x, want all ones", addr, a)
		}
	}
	// The vendor ID is read-only.
	c.write(0, 0, 2, 0x1234)
	if v := c.read(0, 0, 2); v != HostBridgeVendor {
		t.Fatalf("vendor ID changed to %#x", v)
	}
}

type move struct {
	addr   uint64
	mapped bool
}

func newBARFunction(t *testing.T) (*PCIBus, *Bus, *recordingDev, *[]move, int) {
	mmio := NewMMIOBus()
	b := NewPCIBus(mmio)
	f := NewPCIConfig(PCIHeader{VendorID: 0x1af4, DeviceID: 0x1041, Revision: 1, Class: 0x020000})
	dev := &recordingDev{}
	var moves []move
	if err := f.AddBAR64(0, 0xc0000000, PCIBAR{Size: 0x8000, Prefetch: true, Dev: dev,
		Moved: func(a uint64, m bool) { moves = append(moves, move{a, m}) }}); err != nil {
		t.Fatal(err)
	}
	f.SetMemoryEnabled(true)
	slot, err := b.Add(f)
	if err != nil || slot != 1 {
		t.Fatalf("Add = %d, %v", slot, err)
	}
	return b, mmio, dev, &moves, slot
}

func TestPCIBARSizingAndMoving(t *testing.T) {
	b, mmio, dev, moves, slot := newBARFunction(t)
	c := cfg{t, b}
	if len(*moves) != 1 || (*moves)[0] != (move{0xc0000000, true}) {
		t.Fatalf("moves after Add = %v", *moves)
	}
	var d [4]byte
	if !mmio.Read(0xc0000010, d[:]) || len(dev.reads) != 1 || dev.reads[0] != 0x10 {
		t.Fatalf("MMIO read did not reach the BAR at offset 0x10 (reads %v)", dev.reads)
	}
	if v := c.read(slot, PCIBAR0, 4); v != 0xc000000c {
		t.Fatalf("BAR0 low = %#x, want 0xc000000c (64-bit prefetchable)", v)
	}

	// Linux's __pci_read_base: decoding off, all ones, read, restore.
	cmd := c.read(slot, PCICommand, 2)
	c.write(slot, PCICommand, 2, cmd&^PCICommandMemory)
	c.write(slot, PCIBAR0, 4, 0xffffffff)
	c.write(slot, PCIBAR0+4, 4, 0xffffffff)
	if lo, hi := c.read(slot, PCIBAR0, 4), c.read(slot, PCIBAR0+4, 4); lo != 0xffff800c || hi != 0xffffffff {
		t.Fatalf("sized BAR reads %#x %#x, want 0xffff800c 0xffffffff", lo, hi)
	}
	c.write(slot, PCIBAR0, 4, 0xc0000000)
	c.write(slot, PCIBAR0+4, 4, 0)
	c.write(slot, PCICommand, 2, cmd)
	want := []move{{0xc0000000, true}, {0xc0000000, false}, {0xc0000000, true}}
	if len(*moves) != 3 || (*moves)[1] != want[1] || (*moves)[2] != want[2] {
		t.Fatalf("moves = %v, want %v", *moves, want)
	}

	// Moving it: the owner hears of it and the bus follows.
	c.write(slot, PCIBAR0, 4, 0xd0000000)
	if got := (*moves)[len(*moves)-2:]; got[0] != (move{0xc0000000, false}) || got[1] != (move{0xd0000000, true}) {
		t.Fatalf("moves = %v", *moves)
	}
	if mmio.Read(0xc0000000, d[:]) {
		t.Fatal("the old BAR address still decodes")
	}
	if !mmio.Read(0xd0000004, d[:]) {
		t.Fatal("the new BAR address does not decode")
	}
	// A 64-bit address above 4 GiB.
	c.write(slot, PCIBAR0+4, 4, 0x1)
	if !mmio.Read(0x1_d0000000, d[:]) {
		t.Fatal("BAR above 4 GiB does not decode")
	}
	// Low bits of an unaligned address are dropped.
	c.write(slot, PCIBAR0, 4, 0xd0001234)
	if v := c.read(slot, PCIBAR0, 4); v != 0xd000000c {
		t.Fatalf("unaligned BAR write reads back %#x", v)
	}
	// The unused BARs read as zero and ignore writes.
	c.write(slot, PCIBAR0+8, 4, 0xffffffff)
	if v := c.read(slot, PCIBAR0+8, 4); v != 0 {
		t.Fatalf("unused BAR2 reads %#x", v)
	}
}

func TestPCICapabilities(t *testing.T) {
	f := NewPCIConfig(PCIHeader{VendorID: 1})
	o1, err := f.AddCapability(0x09, []byte{14, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := f.AddCapability(0x11, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{0, 0xc0})
	if err != nil {
		t.Fatal(err)
	}
	var wrote []uint8
	f.OnWrite = func(off uint8, n int) { wrote = append(wrote, off) }
	b := NewPCIBus(NewMMIOBus())
	slot, _ := b.Add(f)
	c := cfg{t, b}
	if c.read(slot, PCIStatus, 2)&PCIStatusCapList == 0 {
		t.Fatal("status lacks the capability-list bit")
	}
	var ids []uint32
	for p := c.read(slot, PCICapPtr, 1); p != 0 && len(ids) < 10; p = c.read(slot, int(p)+1, 1) {
		if p%4 != 0 || p < 0x40 {
			t.Fatalf("capability at %#x", p)
		}
		ids = append(ids, c.read(slot, int(p), 1))
	}
	if len(ids) != 2 || ids[0] != 0x09 || ids[1] != 0x11 || o1 != 0x40 || o2 != 0x50 {
		t.Fatalf("capability ids %v at %#x, %#x", ids, o1, o2)
	}
	c.write(slot, int(o2)+2, 2, 0xffff)
	if v := c.read(slot, int(o2)+2, 2); v != 0xc000 {
		t.Fatalf("MSI-X control reads %#x after writing all ones, want only the writable bits", v)
	}
	if len(wrote) != 1 || wrote[0] != o2+2 {
		t.Fatalf("OnWrite calls %v", wrote)
	}
	if _, err := f.AddCapability(0x09, make([]byte, 200), nil); err == nil {
		t.Fatal("an oversized capability was accepted")
	}
}

func TestPCIBARErrors(t *testing.T) {
	f := NewPCIConfig(PCIHeader{})
	dev := &recordingDev{}
	for _, bad := range []struct {
		i    int
		addr uint64
		size uint64
	}{{5, 0, 0x1000}, {-1, 0, 0x1000}, {0, 0x1000, 0x3000}, {0, 0x1800, 0x1000}, {0, 0, 8}} {
		if err := f.AddBAR64(bad.i, bad.addr, PCIBAR{Size: bad.size, Dev: dev}); err == nil {
			t.Errorf("AddBAR64(%d, %#x, size %#x) accepted", bad.i, bad.addr, bad.size)
		}
	}
	if err := f.AddBAR64(0, 0x1000, PCIBAR{Size: 0x1000}); err == nil {
		t.Error("a BAR without a device was accepted")
	}
}
