package virtiotest

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Interrupt is a virtio.Interrupt (and MSI vector) that counts triggers
// and can be waited on. Triggers coalesce like an interrupt line: Wait
// returns once for any number of triggers since the previous Wait.
type Interrupt struct {
	n      atomic.Uint64
	ch     chan struct{}
	masked atomic.Bool

	// Addr and Data are the MSI message last set through Update.
	addr atomic.Uint64
	data atomic.Uint32
}

// NewInterrupt returns an interrupt with no triggers.
func NewInterrupt() *Interrupt { return &Interrupt{ch: make(chan struct{}, 1)} }

// Trigger implements virtio.Interrupt. It never blocks.
func (i *Interrupt) Trigger() error {
	i.n.Add(1)
	select {
	case i.ch <- struct{}{}:
	default:
	}
	return nil
}

// Count returns how many times Trigger was called.
func (i *Interrupt) Count() uint64 { return i.n.Load() }

// Wait blocks until a trigger arrives that no earlier Wait consumed, or the
// timeout passes; it reports whether one arrived.
func (i *Interrupt) Wait(timeout time.Duration) bool {
	select {
	case <-i.ch:
		return true
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-i.ch:
		return true
	case <-t.C:
		return false
	}
}

// Update implements pci.MSIVector: it records the message and mask.
func (i *Interrupt) Update(addr uint64, data uint32, masked bool) error {
	i.addr.Store(addr)
	i.data.Store(data)
	i.masked.Store(masked)
	return nil
}

// Message returns the MSI address, data and mask last set by Update.
func (i *Interrupt) Message() (addr uint64, data uint32, masked bool) {
	return i.addr.Load(), i.data.Load(), i.masked.Load()
}

// Close implements pci.MSIVector.
func (i *Interrupt) Close() error { return nil }

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
