package virtio_test

import (
	"bytes"
	"testing"

	"tinyvmm/virtio/virtiotest"
)

// TestDeviceNeverWritesDriverAreas runs tx and rx traffic, indirect
// included, with notifications toggled on both sides, and checks the
// descriptor table and the available ring (apart from the driver's own
// fields) are byte for byte what the driver wrote.
func TestDeviceNeverWritesDriverAreas(t *testing.T) {
	d, r, q := newRing(t, 16, virtiotest.RingOptions{Indirect: 4, EventIdx: true})
	desc := d.Bytes(r.DescAddr, 16*16)
	avail := d.Bytes(r.AvailAddr, 4+2*16+2)
	for round := 0; round < 40; round++ {
		if round%2 == 0 {
			r.AddChain([][]byte{[]byte("hdr"), []byte("payload")}, []uint32{16})
		} else {
			r.AddIndirect([][]byte{[]byte("x")}, []uint32{8, 8})
		}
		r.EnableInterrupts()
		before := append(append([]byte(nil), desc...), avail...)
		q.DisableNotify()
		c := mustPop(t, q)
		for _, b := range c.Bufs {
			if b.Write {
				s, _ := d.Mem.Slice(b.Addr, uint64(b.Len))
				copy(s, "written by the device")
			}
		}
		q.AddUsed(c.Head, 8)
		q.PublishUsed()
		q.NeedsInterrupt()
		q.EnableNotify()
		if after := append(append([]byte(nil), desc...), avail...); !bytes.Equal(before, after) {
			t.Fatalf("round %d: the device wrote into the descriptor table or the available ring", round)
		}
		r.Used()
	}
}

// BenchmarkQueueRoundTrip is the ring cost per frame with the driver and
// the device on one goroutine: add, kick check, pop, used, publish,
// interrupt check, collect.
func BenchmarkQueueRoundTrip(b *testing.B) {
	_, r, q := newRing(b, 256, virtiotest.RingOptions{EventIdx: true, NoKickFD: true})
	r.Notify = func() {}
	frame := [][]byte{make([]byte, 64)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 32 {
		for j := 0; j < 32; j++ {
			r.AddChain(frame, nil)
		}
		r.Kick()
		for {
			c, ok, _ := q.Pop()
			if !ok {
				break
			}
			q.AddUsed(c.Head, 0)
		}
		q.PublishUsed()
		q.NeedsInterrupt()
		q.EnableNotify()
		r.Used()
	}
}
