package virtio

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Field16 is one 16-bit little-endian field of a virtqueue ring (avail.idx,
// used.idx, the flags, used_event, avail_event) that the device and the
// driver access concurrently.
//
// Go's sync/atomic has no 16-bit operations, so a Field16 works on the
// naturally aligned 32-bit word that contains the field: a load is an atomic
// 32-bit load and a shift, a store is a compare-and-swap loop that changes
// only this field's half. The CAS matters: the other half may belong to the
// other side (avail_event is followed by guest bytes past the used ring), and
// a plain 32-bit store would overwrite a concurrent write there. x86 is
// little-endian and so is virtio 1.x, so the field's byte offset in the word
// (0 or 2) selects the low or high half. On x86 an atomic load is a plain
// mov and the CAS a lock cmpxchg, so both are full barriers for the device,
// which is what the virtio memory-ordering rules need; to the race detector
// they are synchronizing accesses, which is what lets tests run the driver
// and the device on two goroutines.
//
// A field at the very end of RAM may have no whole word around it (the used
// ring's avail_event, 4-aligned, as the last 2 bytes of RAM): such a field
// is accessed alone with a 16-bit atomic. Nobody else can share its word,
// and neither event field publishes data, so the race detector not seeing
// those accesses loses no ordering it checks.
type Field16 struct {
	word  *uint32
	shift uint32
	half  *uint16 // set instead of word when the word does not fit in RAM
}

// NewField16 binds the 2-byte field at guest address gpa. It fails when gpa
// is odd, when the field is outside guest memory, or when the host memory
// behind it is not aligned like the guest address.
func NewField16(mem Memory, gpa uint64) (Field16, error) {
	if gpa%2 != 0 {
		return Field16{}, fmt.Errorf("ring field at %#x is not 2-byte aligned", gpa)
	}
	b, err := mem.Slice(gpa&^3, 4)
	if err != nil {
		// Only the field's own 2 bytes need to be RAM.
		if gpa%4 != 0 || !have16 {
			return Field16{}, err
		}
		h, herr := mem.Slice(gpa, 2)
		if herr != nil {
			return Field16{}, herr
		}
		p := unsafe.Pointer(&h[0])
		if uintptr(p)%2 != 0 {
			return Field16{}, fmt.Errorf("host memory behind guest address %#x is not 2-byte aligned", gpa)
		}
		return Field16{half: (*uint16)(p)}, nil
	}
	p := unsafe.Pointer(&b[0])
	if uintptr(p)%4 != 0 {
		return Field16{}, fmt.Errorf("host memory behind guest address %#x is not 4-byte aligned", gpa)
	}
	return Field16{word: (*uint32)(p), shift: uint32(gpa&2) * 8}, nil
}

// Valid reports whether the field is bound.
func (f Field16) Valid() bool { return f.word != nil || f.half != nil }

// Load reads the field atomically.
func (f Field16) Load() uint16 {
	if f.half != nil {
		return load16(f.half)
	}
	return uint16(atomic.LoadUint32(f.word) >> f.shift)
}

// Store writes the field atomically, leaving the other half of its word as
// it is at that instant.
func (f Field16) Store(v uint16) {
	if f.half != nil {
		store16(f.half, v)
		return
	}
	mask := uint32(0xffff) << f.shift
	for {
		old := atomic.LoadUint32(f.word)
		nw := old&^mask | uint32(v)<<f.shift
		if atomic.CompareAndSwapUint32(f.word, old, nw) {
			return
		}
	}
}
