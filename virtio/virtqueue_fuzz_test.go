package virtio_test

import (
	"encoding/binary"
	"testing"

	"tinyvmm/virtio"
)

// Fuzz layout: 4 KiB of guest memory whose first bytes come from the
// fuzzer, so it controls the descriptor table (0x000), the avail ring
// (0x400) and the buffers and indirect tables they point at.
const (
	fuzzMem   = 4096
	fuzzDesc  = 0x000
	fuzzAvail = 0x400
	fuzzUsed  = 0x800
)

// FuzzQueue drives Pop over arbitrary descriptor tables and indexes: it
// must never panic or hang, and every chain it returns must satisfy the
// invariants the device relies on.
func FuzzQueue(f *testing.F) {
	seed := make([]byte, 0x440)
	put := func(i int, addr uint64, n uint32, flags, next uint16) {
		binary.LittleEndian.PutUint64(seed[16*i:], addr)
		binary.LittleEndian.PutUint32(seed[16*i+8:], n)
		binary.LittleEndian.PutUint16(seed[16*i+12:], flags)
		binary.LittleEndian.PutUint16(seed[16*i+14:], next)
	}
	put(0, 0xc00, 16, virtio.DescFNext, 1)
	put(1, 0xd00, 32, virtio.DescFWrite, 0)
	put(2, 0x300, 32, virtio.DescFIndirect, 0)
	put(0x30, 0xe00, 8, virtio.DescFNext, 1) // the indirect table at 0x300
	put(0x31, 0xe80, 8, virtio.DescFWrite, 0)
	binary.LittleEndian.PutUint16(seed[fuzzAvail+4:], 0)
	binary.LittleEndian.PutUint16(seed[fuzzAvail+6:], 2)
	f.Add(seed, uint16(2), uint8(3), false, uint16(0))
	f.Add(seed, uint16(9), uint8(3), true, uint16(1))
	f.Add(seed[:64], uint16(1), uint8(0), false, uint16(0))

	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, data []byte, availIdx uint16, sizeLog uint8, eventIdx bool, usedEvent uint16) {
	mem := virtio.FlatMemory(make([]byte, fuzzMem))
	copy(mem, data)
	size := uint16(1) << (sizeLog % 7) // 1..64: the rings fit their slots
	binary.LittleEndian.PutUint16(mem[fuzzAvail+2:], availIdx)
	binary.LittleEndian.PutUint16(mem[fuzzAvail+4+2*int(size):], usedEvent)
	q := &virtio.Queue{Size: size, MaxSize: 64, DescAddr: fuzzDesc, AvailAddr: fuzzAvail,
		UsedAddr: fuzzUsed, Ready: true, EventIdx: eventIdx, Mem: mem,
		Indirect: sizeLog&0x80 == 0} // sizeLog's top bit: INDIRECT_DESC not negotiated
	q.EnableNotify()
	for i := 0; i < 2*int(size)+2; i++ {
		c, ok, err := q.Pop()
		if err != nil {
			if _, _, again := q.Pop(); again == nil {
				t.Fatal("queue accepted work after an error")
			}
			return
		}
		if !ok {
			break
		}
		checkChain(t, q, c, len(mem))
		q.AddUsed(c.Head, 0)
		if i%3 == 0 {
			q.PublishUsed()
			q.NeedsInterrupt()
		}
	}
	q.PublishUsed()
	q.NeedsInterrupt()
	q.DisableNotify()
}

func checkChain(t *testing.T, q *virtio.Queue, c virtio.Chain, memLen int) {
	if c.Head >= q.Size {
		t.Fatalf("head %d outside queue of %d", c.Head, q.Size)
	}
	if len(c.Bufs) == 0 || len(c.Bufs) > int(q.Size) {
		t.Fatalf("chain of %d buffers in a queue of %d", len(c.Bufs), q.Size)
	}
	sawWrite := false
	for _, b := range c.Bufs {
		if b.Addr+uint64(b.Len) < b.Addr || b.Addr+uint64(b.Len) > uint64(memLen) {
			t.Fatalf("buffer %#x+%#x outside memory", b.Addr, b.Len)
		}
		if sawWrite && !b.Write {
			t.Fatal("readable buffer after a writable one")
		}
		sawWrite = sawWrite || b.Write
	}
}
