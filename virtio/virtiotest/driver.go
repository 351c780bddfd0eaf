// Package virtiotest is a virtio driver written in Go that plays the guest
// for tests and benchmarks of virtio devices, with no VM.
//
// A Driver owns a virtio.FlatMemory that stands for guest RAM and hands
// out guest addresses in it the way a guest kernel would. NewQueue lays out
// a split virtqueue there (descriptor table, available and used rings, one
// data buffer per descriptor) and returns a Ring, the driver's side of it:
// AddChain posts buffers, Kick notifies the device through an eventfd (only
// when the device asked for it, EVENT_IDX or NO_NOTIFY), Used collects what
// the device returned and ReadBuf reads what it wrote. Ring.Queue is the
// device's side, a virtio.Queue over the same memory, and
// Driver.Activation bundles everything a virtio.Device gets on
// DRIVER_OK.
//
// The hot path (AddChain, Kick, Used, ReadBuf) does not allocate, so a
// Ring on its own goroutine can drive a device at millions of chains per
// second. Hostile layouts come from the raw hooks (WriteDesc, PushAvail,
// SetAvailIdx, WriteIndirect), which write the rings without any checks.
//
// A Ring is used by one goroutine; the device runs on another, and the two
// meet only through atomics on the ring indexes, as a real guest and device
// do, so tests can run under the race detector.
package virtiotest

import (
	"errors"
	"fmt"
	"sync"

	"tinyvmm/virtio"
)

// Driver is the guest: its memory and a bump allocator over it.
type Driver struct {
	Mem virtio.FlatMemory

	next   uint64 // first free guest address
	rings  []*Ring
	Config *Interrupt // the config-change interrupt Activation hands out

	failMu   sync.Mutex
	failures []error
}

// PageSize is the alignment of the memory start and of the rings.
const PageSize = 4096

// New returns a driver with size bytes of guest memory at guest address 0.
// The first page is left unused so that address 0 never holds a buffer.
func New(size int) *Driver {
	raw := make([]byte, size+PageSize)
	off := 0
	for (uintptrOf(raw[off:]) % PageSize) != 0 {
		off++
	}
	return &Driver{
		Mem:    virtio.FlatMemory(raw[off : off+size : off+size]),
		next:   PageSize,
		Config: NewInterrupt(),
	}
}

// ErrNoMemory says the driver's guest memory is used up.
var ErrNoMemory = errors.New("virtiotest: guest memory exhausted (pass a larger size to New)")

// Alloc reserves n bytes aligned to align (a power of two) and returns their
// guest address.
func (d *Driver) Alloc(n, align uint64) (uint64, error) {
	if align == 0 {
		align = 1
	}
	gpa := (d.next + align - 1) &^ (align - 1)
	if gpa+n < gpa || gpa+n > uint64(len(d.Mem)) {
		return 0, ErrNoMemory
	}
	d.next = gpa + n
	return gpa, nil
}

// Bytes returns guest memory at gpa; it panics when the range is outside
// memory, which in a test is a bug in the test.
func (d *Driver) Bytes(gpa uint64, n int) []byte {
	b, err := d.Mem.Slice(gpa, uint64(n))
	if err != nil {
		panic(fmt.Sprintf("virtiotest: %v", err))
	}
	return b
}

// Activation returns what a device gets on DRIVER_OK for these rings: the
// device's queues, the rings' kick eventfds and interrupts, the config
// interrupt, and a Fail that records into Failures.
func (d *Driver) Activation(features uint64, rings ...*Ring) virtio.Activation {
	a := virtio.Activation{
		Mem:      d.Mem,
		Features: features,
		Config:   d.Config,
		Fail: func(err error) {
			d.failMu.Lock()
			d.failures = append(d.failures, err)
			d.failMu.Unlock()
		},
	}
	for _, r := range rings {
		a.Queues = append(a.Queues, r.Queue())
		a.Kicks = append(a.Kicks, r.KickFD)
		a.Interrupts = append(a.Interrupts, r.Irq)
	}
	return a
}

// Failures returns the errors the device reported through Activation.Fail.
func (d *Driver) Failures() []error {
	d.failMu.Lock()
	defer d.failMu.Unlock()
	return append([]error(nil), d.failures...)
}

// Close closes the rings' kick eventfds.
func (d *Driver) Close() error {
	var errs []error
	for _, r := range d.rings {
		errs = append(errs, r.closeKick())
	}
	d.rings = nil
	return errors.Join(errs...)
}
