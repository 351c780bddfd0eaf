package pci

import (
	"encoding/binary"
	"sync/atomic"
)

// ISR status bits (virtio 1.2, 4.1.4.5). With MSI-X the queue bit is
// unused; the config bit still tells the driver why it was interrupted.
const (
	isrQueue  = 1
	isrConfig = 2
)

// MSI-X table entry layout and control bits (PCI spec).
const (
	msixEntrySize    = 16
	msixVectorMasked = 1 // vector control bit 0
	msixCtrlEnable   = 0x8000
	msixCtrlMask     = 0x4000
)

// msixState is the MSI-X table and the vectors allocated for it. Entries
// start masked; a vector is allocated from the Hypervisor when the driver
// first assigns it to an event, and freed at device reset.
type msixState struct {
	table    []byte
	enabled  bool
	funcMask bool
	vectors  []*msixVector
}

func (m *msixState) init(n int) {
	m.table = make([]byte, n*msixEntrySize)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(m.table[i*msixEntrySize+12:], msixVectorMasked)
	}
	m.vectors = make([]*msixVector, n)
}

func (m *msixState) size() int { return len(m.vectors) }

// vector returns the allocated vector v, or nil.
func (m *msixState) vector(v uint16) *msixVector {
	if int(v) < len(m.vectors) {
		return m.vectors[v]
	}
	return nil
}

// useVectorLocked is a driver write of vector number v to an event: it
// allocates the vector if needed and returns what the driver reads back,
// MSINoVector when v is out of range or no vector could be had (Linux
// checks that read-back).
func (t *Transport) useVectorLocked(v uint16) uint16 {
	m := &t.msix
	if v == MSINoVector || int(v) >= m.size() {
		return MSINoVector
	}
	if m.vectors[v] == nil {
		mv, err := t.hv.NewMSIVector()
		if err != nil {
			t.opts.Logf("virtio-pci: no MSI vector for the guest: %v", err)
			return MSINoVector
		}
		m.vectors[v] = &msixVector{v: mv}
		m.vectors[v].masked.Store(true)
		t.updateVectorLocked(int(v))
	}
	return v
}

// updateVectorLocked pushes entry i's message and mask to its vector.
func (t *Transport) updateVectorLocked(i int) {
	m := &t.msix
	mv := m.vectors[i]
	if mv == nil {
		return
	}
	e := m.table[i*msixEntrySize:]
	addr := binary.LittleEndian.Uint64(e)
	data := binary.LittleEndian.Uint32(e[8:])
	masked := !m.enabled || m.funcMask || binary.LittleEndian.Uint32(e[12:])&msixVectorMasked != 0
	if err := mv.v.Update(addr, data, masked); err != nil {
		t.opts.Logf("virtio-pci: MSI-X vector %d: %v", i, err)
	}
	mv.setMasked(masked)
}

func (t *Transport) updateAllVectorsLocked() {
	for i := range t.msix.vectors {
		t.updateVectorLocked(i)
	}
}

func (m *msixState) closeVectors() {
	for i, v := range m.vectors {
		if v != nil {
			v.v.Close()
			m.vectors[i] = nil
		}
	}
}

func (t *Transport) msixTableRead(off uint64, data []byte) { readWindow(t.msix.table, off, data) }

func (t *Transport) msixTableWrite(off uint64, data []byte) {
	m := &t.msix
	if off >= uint64(len(m.table)) || off+uint64(len(data)) > uint64(len(m.table)) {
		return
	}
	copy(m.table[off:], data)
	first, last := int(off)/msixEntrySize, (int(off)+len(data)-1)/msixEntrySize
	for i := first; i <= last; i++ {
		t.updateVectorLocked(i)
	}
}

func (t *Transport) msixPBARead(off uint64, data []byte) {
	var pba [barBlock / 8 / msixEntrySize]byte
	for i, v := range t.msix.vectors {
		if v != nil && v.pending.Load() {
			pba[i/8] |= 1 << (i % 8)
		}
	}
	readWindow(pba[:], off, data)
}

// msixVector is the virtio.Interrupt the device gets for one vector. While the
// vector is masked a trigger only sets the pending bit; unmasking delivers
// it, as MSI-X requires. Trigger is lock-free: the device's worker calls it.
type msixVector struct {
	v       MSIVector
	masked  atomic.Bool
	pending atomic.Bool
}

// Trigger implements virtio.Interrupt. Pending is set before masked is read, and
// setMasked clears masked before it takes pending, so one of the two
// always delivers.
func (m *msixVector) Trigger() error {
	m.pending.Store(true)
	if m.masked.Load() {
		return nil
	}
	if m.pending.Swap(false) {
		return m.v.Trigger()
	}
	return nil
}

func (m *msixVector) setMasked(masked bool) {
	m.masked.Store(masked)
	if !masked && m.pending.Swap(false) {
		m.v.Trigger()
	}
}
