package devices

import (
	"bytes"
	"sync"
	"testing"
)

// recordingDevice remembers the last access and answers reads with a fixed
// byte pattern derived from the offset.
type recordingDevice struct {
	mu         sync.Mutex
	lastOffset uint64
	lastWrite  []byte
	reads      int
}

func (d *recordingDevice) Read(offset uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastOffset = offset
	d.reads++
	for i := range data {
		data[i] = byte(offset) + byte(i)
	}
}

func (d *recordingDevice) Write(offset uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastOffset = offset
	d.lastWrite = append([]byte(nil), data...)
}

func TestBusDispatchesWithOffset(t *testing.T) {
	b := NewPIOBus()
	d := &recordingDevice{}
	if err := b.Register(0x3f8, 8, d); err != nil {
		t.Fatal(err)
	}
	if !b.Write(0x3fb, []byte{0x80}) {
		t.Fatal("write at 0x3fb not claimed")
	}
	if d.lastOffset != 3 || !bytes.Equal(d.lastWrite, []byte{0x80}) {
		t.Fatalf("device saw offset %d data %x, want 3 [80]", d.lastOffset, d.lastWrite)
	}
	buf := make([]byte, 2)
	if !b.Read(0x3fd, buf) || !bytes.Equal(buf, []byte{5, 6}) {
		t.Fatalf("read at 0x3fd = %x, want 0506", buf)
	}
}

func TestBusUnclaimedReadsAllOnes(t *testing.T) {
	b := NewMMIOBus()
	d := &recordingDevice{}
	if err := b.Register(0x1000, 0x10, d); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []uint64{0, 0xfff, 0x1010, 1 << 40} {
		buf := []byte{1, 2, 3, 4}
		if b.Read(addr, buf) {
			t.Errorf("read at %#x claimed", addr)
		}
		if !bytes.Equal(buf, []byte{0xff, 0xff, 0xff, 0xff}) {
			t.Errorf("unclaimed read at %#x = %x, want ffffffff", addr, buf)
		}
		if b.Write(addr, buf) {
			t.Errorf("write at %#x claimed", addr)
		}
	}
	if d.reads != 0 {
		t.Errorf("device saw %d reads outside its range", d.reads)
	}
}

func TestBusRejectsOverlapsAndBadRanges(t *testing.T) {
	var b Bus // the zero value works
	if err := b.Register(0x100, 0x10, &recordingDevice{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ base, size uint64 }{
		{0x100, 1}, {0xf0, 0x11}, {0x10f, 0x10}, {0x80, 0x100}, {0x104, 2},
	} {
		if err := b.Register(r.base, r.size, &recordingDevice{}); err == nil {
			t.Errorf("Register(%#x, %#x) overlapping 0x100+0x10 succeeded", r.base, r.size)
		}
	}
	if err := b.Register(0x110, 0x10, &recordingDevice{}); err != nil {
		t.Errorf("adjacent range rejected: %v", err)
	}
	if err := b.Register(0xf0, 0x10, &recordingDevice{}); err != nil {
		t.Errorf("adjacent range below rejected: %v", err)
	}
	if err := b.Register(5, 0, &recordingDevice{}); err == nil {
		t.Error("zero-size range accepted")
	}
	if err := b.Register(^uint64(0)-1, 4, &recordingDevice{}); err == nil {
		t.Error("wrapping range accepted")
	}
	if err := b.Register(0x900, 1, nil); err == nil {
		t.Error("nil device accepted")
	}
}

func TestBusUnregister(t *testing.T) {
	b := NewMMIOBus()
	d := &recordingDevice{}
	if err := b.Register(0xc0000000, 0x1000, d); err != nil {
		t.Fatal(err)
	}
	if err := b.Unregister(0xc0000000); err != nil {
		t.Fatal(err)
	}
	if b.Write(0xc0000010, []byte{1}) {
		t.Error("write claimed after Unregister")
	}
	if err := b.Unregister(0xc0000000); err == nil {
		t.Error("second Unregister succeeded")
	}
	if err := b.Register(0xc0000000, 0x1000, d); err != nil {
		t.Errorf("re-register after Unregister: %v", err)
	}
}

// TestBusConcurrentAccess runs lookups from several goroutines while ranges
// come and go; run with -race.
func TestBusConcurrentAccess(t *testing.T) {
	b := NewMMIOBus()
	fixed := &recordingDevice{}
	if err := b.Register(0x0, 0x100, fixed); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4)
			for i := 0; i < 2000; i++ {
				if !b.Read(0x10, buf) {
					t.Error("fixed device vanished")
					return
				}
				b.Write(0x1000, buf)
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if err := b.Register(0x1000, 0x10, &recordingDevice{}); err != nil {
			t.Fatal(err)
		}
		if err := b.Unregister(0x1000); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
