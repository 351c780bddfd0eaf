package devices

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// BusDevice is a device model claiming a range of port-I/O or MMIO space.
// offset is relative to the start of the range it was registered on; data
// is the access (1, 2, 4 or 8 bytes, little endian). Read fills data.
type BusDevice interface {
	Read(offset uint64, data []byte)
	Write(offset uint64, data []byte)
}

// Bus dispatches guest accesses to the device claiming the address. It is
// copy-on-write: lookups from many vCPU threads take no lock, and Register
// and Unregister (rare) publish a new sorted table. The zero value is an
// empty bus.
type Bus struct {
	name    string
	entries atomic.Pointer[[]busEntry]
	writers sync.Mutex
}

type busEntry struct {
	base, size uint64
	dev        BusDevice
}

// NewBus makes an empty bus; name ("pio", "mmio") appears in errors.
func NewBus(name string) *Bus {
	return &Bus{name: name}
}

// NewPIOBus is the port-I/O bus (addresses 0..0xffff).
func NewPIOBus() *Bus { return NewBus("pio") }

// NewMMIOBus is the MMIO bus.
func NewMMIOBus() *Bus { return NewBus("mmio") }

// Register claims [base, base+size) for dev. Overlapping an existing range
// is an error.
func (b *Bus) Register(base, size uint64, dev BusDevice) error {
	if size == 0 || base+size < base {
		return fmt.Errorf("%s bus: bad range %#x+%#x", b.name, base, size)
	}
	if dev == nil {
		return fmt.Errorf("%s bus: nil device at %#x", b.name, base)
	}
	b.writers.Lock()
	defer b.writers.Unlock()
	old := b.snapshot()
	for _, e := range old {
		if base < e.base+e.size && e.base < base+size {
			return fmt.Errorf("%s bus: range %#x+%#x overlaps %#x+%#x", b.name, base, size, e.base, e.size)
		}
	}
	next := make([]busEntry, 0, len(old)+1)
	next = append(next, old...)
	next = append(next, busEntry{base: base, size: size, dev: dev})
	sort.Slice(next, func(i, j int) bool { return next[i].base < next[j].base })
	b.entries.Store(&next)
	return nil
}

// Unregister releases the range registered at exactly base.
func (b *Bus) Unregister(base uint64) error {
	b.writers.Lock()
	defer b.writers.Unlock()
	old := b.snapshot()
	for i, e := range old {
		if e.base == base {
			next := make([]busEntry, 0, len(old)-1)
			next = append(next, old[:i]...)
			next = append(next, old[i+1:]...)
			b.entries.Store(&next)
			return nil
		}
	}
	return fmt.Errorf("%s bus: nothing registered at %#x", b.name, base)
}

// snapshot is the current table; never modified once published.
func (b *Bus) snapshot() []busEntry {
	if p := b.entries.Load(); p != nil {
		return *p
	}
	return nil
}

// find returns the entry containing addr, if any.
func (b *Bus) find(addr uint64) (busEntry, bool) {
	es := b.snapshot()
	i := sort.Search(len(es), func(i int) bool { return es[i].base+es[i].size > addr })
	if i < len(es) && es[i].base <= addr {
		return es[i], true
	}
	return busEntry{}, false
}

// Read dispatches a guest read. An unclaimed address reads as all ones, as
// on a real bus with nothing driving it. It reports whether a device
// claimed the address.
func (b *Bus) Read(addr uint64, data []byte) bool {
	e, ok := b.find(addr)
	if !ok {
		for i := range data {
			data[i] = 0xff
		}
		return false
	}
	e.dev.Read(addr-e.base, data)
	return true
}

// Write dispatches a guest write; unclaimed writes are dropped. It reports
// whether a device claimed the address.
func (b *Bus) Write(addr uint64, data []byte) bool {
	e, ok := b.find(addr)
	if !ok {
		return false
	}
	e.dev.Write(addr-e.base, data)
	return true
}
