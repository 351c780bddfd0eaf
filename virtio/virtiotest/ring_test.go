package virtiotest

import (
	"errors"
	"testing"
	"time"
)

func TestRingBookkeeping(t *testing.T) {
	d := New(1 << 20)
	defer d.Close()
	r, err := d.NewQueue(4, RingOptions{BufSize: 32, Indirect: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddChain(nil, nil); !errors.Is(err, ErrNoChain) {
		t.Fatalf("empty chain: %v", err)
	}
	if _, err := r.AddChain([][]byte{make([]byte, 33)}, nil); !errors.Is(err, ErrTooBig) {
		t.Fatalf("oversized buffer: %v", err)
	}
	if _, err := r.AddIndirect(nil, []uint32{1, 1, 1}); err == nil {
		t.Fatal("an indirect table beyond RingOptions.Indirect was accepted")
	}
	if _, err := r.AddChain(nil, []uint32{1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddChain(nil, []uint32{1, 1}); !errors.Is(err, ErrRingFull) {
		t.Fatalf("overfull ring: %v", err)
	}
	if _, err := r.AddIndirect(nil, []uint32{1, 1}); err != nil {
		t.Fatalf("an indirect chain into the last slot: %v", err)
	}
	if r.Free() != 0 || r.AvailIdx() != 2 {
		t.Fatalf("free %d avail %d", r.Free(), r.AvailIdx())
	}
	// The device returning a head that is not in flight is noticed.
	r.fields.usedIdx.Store(1)
	r.used[0] = 1 // descriptor 1 is inside the first chain (0, 1, 2), not a head
	if u := r.Used(); len(u) != 0 || r.DeviceErr == nil {
		t.Fatalf("bogus used element accepted: %v, %v", u, r.DeviceErr)
	}
}

func TestAllocAndMemory(t *testing.T) {
	d := New(3 * PageSize)
	if uintptrOf(d.Mem)%PageSize != 0 {
		t.Fatal("guest memory is not page aligned")
	}
	a, err := d.Alloc(100, 64)
	if err != nil || a != PageSize {
		t.Fatalf("first allocation at %#x, %v", a, err)
	}
	b, _ := d.Alloc(1, 4096)
	if b != 2*PageSize {
		t.Fatalf("aligned allocation at %#x", b)
	}
	if _, err := d.Alloc(PageSize, 1); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("allocation past the end: %v", err)
	}
	if _, err := d.NewQueue(3, RingOptions{}); err == nil {
		t.Fatal("a queue size that is not a power of 2 was accepted")
	}
}

func TestInterruptWait(t *testing.T) {
	i := NewInterrupt()
	if i.Wait(time.Millisecond) {
		t.Fatal("Wait returned true with no trigger")
	}
	i.Trigger()
	i.Trigger()
	if !i.Wait(time.Second) || i.Wait(time.Millisecond) {
		t.Fatal("two triggers should coalesce into one wakeup")
	}
	if i.Count() != 2 {
		t.Fatalf("count %d", i.Count())
	}
}
