package virtio

import "fmt"

// Memory is guest physical memory as a device model sees it. The VMM backs
// it with mmap'd RAM; tests back it with a plain byte slice.
type Memory interface {
	// Slice returns the n bytes at guest physical address gpa, aliasing
	// guest memory (writes to the slice are writes to the guest). It fails,
	// never panics, when any part of the range is outside guest RAM.
	Slice(gpa, n uint64) ([]byte, error)
}

// FlatMemory is guest RAM that starts at guest physical address 0.
type FlatMemory []byte

// Slice implements Memory.
func (m FlatMemory) Slice(gpa, n uint64) ([]byte, error) {
	end := gpa + n
	if end < gpa || end > uint64(len(m)) {
		return nil, fmt.Errorf("guest range %#x+%#x is outside memory (%#x bytes)", gpa, n, len(m))
	}
	return m[gpa:end:end], nil
}

// Region is one piece of guest RAM at a guest physical address.
type Region struct {
	GPA  uint64
	Data []byte
}

// Regions is guest RAM in several pieces (RAM below and above the 32-bit
// PCI hole). A range may not span two regions.
type Regions []Region

// Slice implements Memory.
func (rs Regions) Slice(gpa, n uint64) ([]byte, error) {
	for _, r := range rs {
		if gpa >= r.GPA && gpa-r.GPA <= uint64(len(r.Data)) {
			return FlatMemory(r.Data).Slice(gpa-r.GPA, n)
		}
	}
	return nil, fmt.Errorf("guest range %#x+%#x is outside memory", gpa, n)
}
