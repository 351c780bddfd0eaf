package kvm

import "unsafe"

// flexBuffer holds a KVM struct with a flexible array member (kvm_cpuid2,
// kvm_msrs, kvm_irq_routing): an 8-byte header followed by n entries of E.
// It is backed by []uint64 so the header and the entries are 8-aligned.
type flexBuffer[H any, E any] struct {
	words []uint64
	n     int
}

func newFlex[H any, E any](n int) *flexBuffer[H, E] {
	var h H
	var e E
	size := unsafe.Sizeof(h) + uintptr(n)*unsafe.Sizeof(e)
	return &flexBuffer[H, E]{words: make([]uint64, (size+7)/8), n: n}
}

func (f *flexBuffer[H, E]) pointer() unsafe.Pointer { return unsafe.Pointer(&f.words[0]) }

func (f *flexBuffer[H, E]) header() *H { return (*H)(f.pointer()) }

func (f *flexBuffer[H, E]) entries() []E {
	if f.n == 0 {
		return nil
	}
	var h H
	return unsafe.Slice((*E)(unsafe.Add(f.pointer(), unsafe.Sizeof(h))), f.n)
}
