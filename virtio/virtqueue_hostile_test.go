package virtio_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"tinyvmm/virtio"
	"tinyvmm/virtio/virtiotest"
)

const (
	next     = virtio.DescFNext
	write    = virtio.DescFWrite
	indirect = virtio.DescFIndirect
)

// TestHostileChains feeds each kind of broken ring to Pop: every one must
// be an error (not a panic, not a hang), and the queue must stay broken
// until Reset.
func TestHostileChains(t *testing.T) {
	const size = 8
	cases := []struct {
		name  string
		build func(r *virtiotest.Ring, mem uint64)
	}{
		{"self loop", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(0), Len: 1, Flags: next, Next: 0})
			r.PushAvail(0)
		}},
		{"two-descriptor loop", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(0), Len: 1, Flags: next, Next: 1})
			r.WriteDesc(1, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 1, Flags: next, Next: 0})
			r.PushAvail(0)
		}},
		{"chain longer than the queue", func(r *virtiotest.Ring, _ uint64) {
			for i := uint16(0); i < size; i++ {
				r.WriteDesc(i, virtiotest.RawDesc{Addr: r.BufAddr(i), Len: 1, Flags: next, Next: (i + 1) % size})
			}
			r.PushAvail(3)
		}},
		{"next index out of range", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(0), Len: 1, Flags: next, Next: size})
			r.PushAvail(0)
		}},
		{"head out of range", func(r *virtiotest.Ring, _ uint64) {
			r.PushAvail(size)
		}},
		{"head far out of range", func(r *virtiotest.Ring, _ uint64) {
			r.PushAvail(0xffff)
		}},
		{"address outside memory", func(r *virtiotest.Ring, mem uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: mem, Len: 1})
			r.PushAvail(0)
		}},
		{"length runs past memory", func(r *virtiotest.Ring, mem uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: mem - 16, Len: 17, Flags: write})
			r.PushAvail(0)
		}},
		{"address+length wraps 64 bits", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: ^uint64(0) - 1, Len: 0x1000})
			r.PushAvail(0)
		}},
		{"readable after writable", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(0), Len: 4, Flags: write | next, Next: 1})
			r.WriteDesc(1, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 4})
			r.PushAvail(0)
		}},
		{"avail index jumps more than the size", func(r *virtiotest.Ring, _ uint64) {
			r.SetAvailIdx(size + 1)
		}},
		{"avail index moves backwards", func(r *virtiotest.Ring, _ uint64) {
			r.SetAvailIdx(0xffff)
		}},
		{"indirect inside indirect", func(r *virtiotest.Ring, _ uint64) {
			t1, t2 := r.BufAddr(1), r.BufAddr(2)
			r.WriteIndirect(t1, []virtiotest.RawDesc{{Addr: t2, Len: 16, Flags: indirect}})
			r.WriteIndirect(t2, []virtiotest.RawDesc{{Addr: r.BufAddr(3), Len: 1}})
			r.WriteDesc(0, virtiotest.RawDesc{Addr: t1, Len: 16, Flags: indirect})
			r.PushAvail(0)
		}},
		{"indirect with next", func(r *virtiotest.Ring, _ uint64) {
			r.WriteIndirect(r.BufAddr(1), []virtiotest.RawDesc{{Addr: r.BufAddr(3), Len: 1}})
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 16, Flags: indirect | next, Next: 2})
			r.WriteDesc(2, virtiotest.RawDesc{Addr: r.BufAddr(2), Len: 1})
			r.PushAvail(0)
		}},
		{"indirect table of zero bytes", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 0, Flags: indirect})
			r.PushAvail(0)
		}},
		{"indirect table not a multiple of 16", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 24, Flags: indirect})
			r.PushAvail(0)
		}},
		{"indirect table longer than the queue", func(r *virtiotest.Ring, _ uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 16 * (size + 1), Flags: indirect})
			r.PushAvail(0)
		}},
		{"indirect table outside memory", func(r *virtiotest.Ring, mem uint64) {
			r.WriteDesc(0, virtiotest.RawDesc{Addr: mem - 16, Len: 32, Flags: indirect})
			r.PushAvail(0)
		}},
		{"loop inside an indirect table", func(r *virtiotest.Ring, _ uint64) {
			r.WriteIndirect(r.BufAddr(1), []virtiotest.RawDesc{
				{Addr: r.BufAddr(2), Len: 1, Flags: next, Next: 1},
				{Addr: r.BufAddr(3), Len: 1, Flags: next, Next: 0},
			})
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 32, Flags: indirect})
			r.PushAvail(0)
		}},
		{"indirect next past its table", func(r *virtiotest.Ring, _ uint64) {
			r.WriteIndirect(r.BufAddr(1), []virtiotest.RawDesc{{Addr: r.BufAddr(2), Len: 1, Flags: next, Next: 1}})
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 16, Flags: indirect})
			r.PushAvail(0)
		}},
		{"indirect readable after writable", func(r *virtiotest.Ring, _ uint64) {
			r.WriteIndirect(r.BufAddr(1), []virtiotest.RawDesc{
				{Addr: r.BufAddr(2), Len: 1, Flags: write | next, Next: 1},
				{Addr: r.BufAddr(3), Len: 1},
			})
			r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 32, Flags: indirect})
			r.PushAvail(0)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, r, q := newRing(t, size, virtiotest.RingOptions{})
			q.Indirect = true // the indirect cases must fail for their own reason
			tc.build(r, uint64(len(d.Mem)))
			if !q.HasAvail() {
				t.Fatal("HasAvail = false; a broken queue must report true so Pop reports the error")
			}
			_, ok, err := q.Pop()
			if err == nil || ok || !errors.Is(err, virtio.ErrQueueBroken) {
				t.Fatalf("Pop = ok %v, err %v; want ErrQueueBroken", ok, err)
			}
			t.Log(err)
			// Sticky: a good chain afterwards is refused too.
			r.WriteDesc(5, virtiotest.RawDesc{Addr: r.BufAddr(5), Len: 1})
			r.SetAvailRing(r.AvailIdx(), 5)
			if _, _, err2 := q.Pop(); err2 == nil {
				t.Fatal("Pop succeeded after the queue broke")
			}
			if q.Err() == nil {
				t.Fatal("Err() = nil after the queue broke")
			}
			q.AddUsed(5, 0) // must not panic on a broken queue
			q.PublishUsed()
			q.NeedsInterrupt()
			q.EnableNotify()
			q.DisableNotify()
		})
	}
}

// TestIndirectNeedsTheFeature: a driver that did not negotiate
// INDIRECT_DESC must not send an indirect descriptor (virtio 1.2, 2.7.5.3.1).
func TestIndirectNeedsTheFeature(t *testing.T) {
	_, r, q := newRing(t, 8, virtiotest.RingOptions{})
	r.WriteIndirect(r.BufAddr(1), []virtiotest.RawDesc{{Addr: r.BufAddr(3), Len: 1}})
	r.WriteDesc(0, virtiotest.RawDesc{Addr: r.BufAddr(1), Len: 16, Flags: indirect})
	r.PushAvail(0)
	if _, ok, err := q.Pop(); ok || !errors.Is(err, virtio.ErrQueueBroken) {
		t.Fatalf("Pop = ok %v, err %v; want ErrQueueBroken", ok, err)
	}
}

// TestResetClearsBrokenQueue checks Reset makes a broken queue usable.
func TestResetClearsBrokenQueue(t *testing.T) {
	_, r, q := newRing(t, 8, virtiotest.RingOptions{})
	r.PushAvail(100)
	if _, _, err := q.Pop(); err == nil {
		t.Fatal("head 100 in a queue of 8 was accepted")
	}
	q.Reset()
	r.SetAvailIdx(0)
	if q.Err() != nil {
		t.Fatalf("Err() = %v after Reset", q.Err())
	}
	head, err := r.AddChain([][]byte{[]byte("ok")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := mustPop(t, q); c.Head != head {
		t.Fatalf("popped head %d, want %d", c.Head, head)
	}
}

// TestBadLayout checks ring placement errors are reported, not panics.
func TestBadLayout(t *testing.T) {
	mem := virtio.FlatMemory(make([]byte, 1<<16))
	good := virtio.Queue{Size: 8, MaxSize: 8, DescAddr: 0x1000, AvailAddr: 0x2000, UsedAddr: 0x3000, Ready: true, Mem: mem}
	cases := map[string]func(q *virtio.Queue){
		"size not a power of 2": func(q *virtio.Queue) { q.Size = 6 },
		"size zero":             func(q *virtio.Queue) { q.Size = 0 },
		"size above max":        func(q *virtio.Queue) { q.Size, q.MaxSize = 16, 8 },
		"desc misaligned":       func(q *virtio.Queue) { q.DescAddr = 0x1008 },
		"avail misaligned":      func(q *virtio.Queue) { q.AvailAddr = 0x2001 },
		"used misaligned":       func(q *virtio.Queue) { q.UsedAddr = 0x3002 },
		"desc outside memory":   func(q *virtio.Queue) { q.DescAddr = 1<<16 - 64 },
		"avail outside memory":  func(q *virtio.Queue) { q.AvailAddr = 1<<16 - 8 },
		"used outside memory":   func(q *virtio.Queue) { q.UsedAddr = 1 << 20 },
		"not ready":             func(q *virtio.Queue) { q.Ready = false },
		"no memory":             func(q *virtio.Queue) { q.Mem = nil },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			q := good
			breakIt(&q)
			if _, _, err := q.Pop(); !errors.Is(err, virtio.ErrQueueBroken) {
				t.Fatalf("Pop err = %v, want ErrQueueBroken", err)
			}
		})
	}
	q := good
	if _, ok, err := q.Pop(); ok || err != nil {
		t.Fatalf("the good layout: Pop = ok %v err %v, want empty", ok, err)
	}
}

// TestResetKeepsConfiguration: Reset keeps everything the transport and the
// device configured (every exported field), so a queue that worked before a
// reset works the same after it. It sets each exported field to a value
// other than its zero value, so a field Reset forgets shows up here.
func TestResetKeepsConfiguration(t *testing.T) {
	mem := virtio.FlatMemory(make([]byte, 1<<16))
	q := virtio.Queue{
		Size: 8, MaxSize: 16, DescAddr: 0x1000, AvailAddr: 0x2000, UsedAddr: 0x3000,
		Ready: true, EventIdx: true, Indirect: true, Mem: mem, AvailEventAhead: 3,
	}
	v := reflect.ValueOf(q)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Type().Field(i); f.IsExported() && v.Field(i).IsZero() {
			t.Fatalf("the test leaves Queue.%s zero; give it a value so Reset is checked for it", f.Name)
		}
	}
	q.Pop() // binds the rings, so Reset has run-time state to forget
	q.Reset()
	after := reflect.ValueOf(q)
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if !reflect.DeepEqual(v.Field(i).Interface(), after.Field(i).Interface()) {
			t.Errorf("Reset changed Queue.%s from %v to %v", f.Name, v.Field(i), after.Field(i))
		}
	}
}

// TestResetKeepsIndirect: an indirect chain pops after a reset, as it did
// before one (Reset used to drop the negotiated INDIRECT_DESC).
func TestResetKeepsIndirect(t *testing.T) {
	_, r, q := newRing(t, 8, virtiotest.RingOptions{Indirect: 2})
	if _, err := r.AddIndirect([][]byte{[]byte("a"), []byte("b")}, nil); err != nil {
		t.Fatal(err)
	}
	mustPop(t, q)
	q.Reset()
	r.SetAvailIdx(0)
	if _, err := r.AddIndirect([][]byte{[]byte("a"), []byte("b")}, nil); err != nil {
		t.Fatal(err)
	}
	if c := mustPop(t, q); len(c.Bufs) != 2 {
		t.Fatalf("after Reset the indirect chain has %d buffers, want 2", len(c.Bufs))
	}
}

// TestRingsEndingAtEndOfMemory: a ring may end on the last byte of guest
// RAM, even when its trailing event field starts a 32-bit word that RAM cuts
// in half (the device used to map the whole word and refuse the ring).
func TestRingsEndingAtEndOfMemory(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		name        string
		avail, used uint64
	}{
		{"used ring last", 0x2000, 0x3000},  // avail_event at 0x3044, RAM ends at 0x3046
		{"avail ring last", 0x3000, 0x2000}, // used_event at 0x3014, RAM ends at 0x3016
	} {
		t.Run(tc.name, func(t *testing.T) {
			end := max(tc.avail+6+2*n, tc.used+6+8*n)
			mem := virtio.FlatMemory(make([]byte, end))
			le := binary.LittleEndian
			const buf = 0x100
			// One readable descriptor at head 0, made available.
			le.PutUint64(mem[0x1000:], buf)
			le.PutUint32(mem[0x1008:], 5)
			le.PutUint16(mem[tc.avail+4:], 0) // avail.ring[0] = head 0
			le.PutUint16(mem[tc.avail+2:], 1) // avail.idx
			le.PutUint16(mem[tc.avail+4+2*n:], 0)
			q := virtio.Queue{Size: n, MaxSize: n, DescAddr: 0x1000, AvailAddr: tc.avail, UsedAddr: tc.used,
				Ready: true, EventIdx: true, Mem: mem, AvailEventAhead: 5}
			c, ok, err := q.Pop()
			if err != nil || !ok || c.Head != 0 {
				t.Fatalf("Pop = %+v ok %v err %v, want head 0", c, ok, err)
			}
			q.AddUsed(c.Head, 0)
			q.PublishUsed()
			if !q.NeedsInterrupt() { // used_event 0 was crossed
				t.Error("NeedsInterrupt = false with used_event 0, want true")
			}
			q.EnableNotify()
			if got := le.Uint16(mem[tc.used+4+8*n:]); got != 1+5 {
				t.Errorf("avail_event = %d, want 6", got)
			}
			if got := le.Uint16(mem[tc.used+2:]); got != 1 {
				t.Errorf("used.idx = %d, want 1", got)
			}
		})
	}
}
