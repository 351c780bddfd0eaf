package virtio_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"tinyvmm/virtio"
	"tinyvmm/virtio/virtiotest"
)

func newRing(t testing.TB, size uint16, opts virtiotest.RingOptions) (*virtiotest.Driver, *virtiotest.Ring, *virtio.Queue) {
	t.Helper()
	d := virtiotest.New(8 << 20)
	t.Cleanup(func() { d.Close() })
	r, err := d.NewQueue(size, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d, r, r.Queue()
}

func mustPop(t *testing.T, q *virtio.Queue) virtio.Chain {
	t.Helper()
	c, ok, err := q.Pop()
	if err != nil || !ok {
		t.Fatalf("Pop = ok %v, err %v; want a chain", ok, err)
	}
	return c
}

func readChain(t *testing.T, mem virtio.Memory, c virtio.Chain) []byte {
	t.Helper()
	var out []byte
	for _, b := range c.Bufs {
		if b.Write {
			continue
		}
		s, err := mem.Slice(b.Addr, uint64(b.Len))
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Buf) != int(b.Len) || (len(s) > 0 && &b.Buf[0] != &s[0]) {
			t.Fatalf("buffer %+v: Buf is not the %d guest bytes at %#x", b, b.Len, b.Addr)
		}
		out = append(out, b.Buf...)
	}
	return out
}

func TestTxChain(t *testing.T) {
	d, r, q := newRing(t, 8, virtiotest.RingOptions{})
	hdr, frame := bytes.Repeat([]byte{0}, 12), []byte("hello, device")
	head, err := r.AddChain([][]byte{hdr, frame}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := mustPop(t, q)
	if c.Head != head || len(c.Bufs) != 2 || c.Bufs[0].Write || c.Bufs[1].Write {
		t.Fatalf("chain = %+v, want head %d with two readable buffers", c, head)
	}
	if got := readChain(t, d.Mem, c); !bytes.Equal(got, append(hdr, frame...)) {
		t.Fatalf("chain bytes = %q", got)
	}
	if _, ok, err := q.Pop(); ok || err != nil {
		t.Fatalf("second Pop = ok %v err %v, want empty", ok, err)
	}
	q.AddUsed(c.Head, 0)
	if len(r.Used()) != 0 {
		t.Fatal("driver saw a used element before PublishUsed")
	}
	q.PublishUsed()
	if u := r.Used(); len(u) != 1 || u[0].ID != uint32(head) || u[0].Len != 0 {
		t.Fatalf("used = %+v", u)
	}
	if r.Free() != 8 {
		t.Fatalf("free descriptors = %d after the chain came back, want 8", r.Free())
	}
}

func TestRxChain(t *testing.T) {
	_, r, q := newRing(t, 8, virtiotest.RingOptions{})
	head, err := r.AddChain([][]byte{[]byte("cmd")}, []uint32{4, 100})
	if err != nil {
		t.Fatal(err)
	}
	c := mustPop(t, q)
	if len(c.Bufs) != 3 || c.Bufs[0].Write || !c.Bufs[1].Write || !c.Bufs[2].Write || c.Bufs[2].Len != 100 {
		t.Fatalf("chain = %+v, want one readable then two writable", c)
	}
	msg := []byte("0123456789")
	for i, off := 0, 0; off < len(msg); i++ {
		off += copy(c.Bufs[1+i].Buf, msg[off:]) // Buf aliases the guest's buffer
	}
	q.AddUsed(c.Head, uint32(len(msg)))
	q.PublishUsed()
	u := r.Used()
	if len(u) != 1 || u[0].ID != uint32(head) {
		t.Fatalf("used = %+v", u)
	}
	if got := r.ReadBuf(u[0], nil); !bytes.Equal(got, msg) {
		t.Fatalf("ReadBuf = %q, want %q", got, msg)
	}
}

func TestIndirectChain(t *testing.T) {
	d, r, q := newRing(t, 4, virtiotest.RingOptions{Indirect: 4})
	head, err := r.AddIndirect([][]byte{[]byte("ab"), []byte("cd")}, []uint32{64})
	if err != nil {
		t.Fatal(err)
	}
	if r.Free() != 3 {
		t.Fatalf("an indirect chain took %d ring descriptors, want 1", 4-r.Free())
	}
	c := mustPop(t, q)
	if c.Head != head || len(c.Bufs) != 3 || !c.Bufs[2].Write {
		t.Fatalf("chain = %+v", c)
	}
	if got := readChain(t, d.Mem, c); string(got) != "abcd" {
		t.Fatalf("readable bytes = %q", got)
	}
}

// TestMergeableRx fills one frame across three single-buffer chains and
// reads it back the way a virtio-net driver with MRG_RXBUF does.
func TestMergeableRx(t *testing.T) {
	d, r, q := newRing(t, 8, virtiotest.RingOptions{BufSize: 100})
	if n, err := r.AddRxBuffers(4, 100); n != 4 || err != nil {
		t.Fatalf("AddRxBuffers = %d, %v", n, err)
	}
	frame := make([]byte, 250)
	for i := range frame {
		frame[i] = byte(i)
	}
	binary.LittleEndian.PutUint16(frame[10:], 3) // num_buffers
	for off := 0; off < len(frame); {
		c := mustPop(t, q)
		if len(c.Bufs) != 1 || !c.Bufs[0].Write {
			t.Fatalf("rx chain = %+v", c)
		}
		s, _ := d.Mem.Slice(c.Bufs[0].Addr, uint64(c.Bufs[0].Len))
		n := copy(s, frame[off:])
		q.AddUsed(c.Head, uint32(n))
		off += n
	}
	q.PublishUsed()
	u := r.Used()
	got, n, err := r.ReadMergeable(u, nil)
	if err != nil || n != 3 || !bytes.Equal(got, frame) {
		t.Fatalf("ReadMergeable = %d elements, err %v, equal %v", n, err, bytes.Equal(got, frame))
	}
}

func TestRewind(t *testing.T) {
	_, r, q := newRing(t, 8, virtiotest.RingOptions{})
	var heads []uint16
	for i := 0; i < 3; i++ {
		h, _ := r.AddChain(nil, []uint32{10})
		heads = append(heads, h)
	}
	mustPop(t, q)
	mustPop(t, q)
	q.Rewind(1)
	if c := mustPop(t, q); c.Head != heads[1] {
		t.Fatalf("after Rewind(1) Pop returned head %d, want %d", c.Head, heads[1])
	}
	if c := mustPop(t, q); c.Head != heads[2] {
		t.Fatalf("Pop returned head %d, want %d", c.Head, heads[2])
	}
}

// TestWraparound runs more chains than the 16-bit indexes can count, with
// chains of varying length so the ring slots and the table drift apart.
func TestWraparound(t *testing.T) {
	_, r, q := newRing(t, 4, virtiotest.RingOptions{BufSize: 16})
	out := [][]byte{[]byte("x"), []byte("yz")}
	for i := 0; i < 70000; i++ {
		n := 1 + i%2
		head, err := r.AddChain(out[:n], []uint32{8})
		if err != nil {
			t.Fatalf("chain %d: %v", i, err)
		}
		c := mustPop(t, q)
		if c.Head != head || len(c.Bufs) != n+1 {
			t.Fatalf("chain %d: popped %+v, want head %d with %d buffers", i, c, head, n+1)
		}
		q.AddUsed(c.Head, 3)
		q.PublishUsed()
		if u := r.Used(); len(u) != 1 || u[0].ID != uint32(head) || u[0].Len != 3 {
			t.Fatalf("chain %d: used %+v", i, u)
		}
	}
	if got := r.UsedIdx(); got != uint16(70000%65536) {
		t.Fatalf("used.idx = %d after 70000 chains, want %d", got, 70000%65536)
	}
}

// TestNoAllocs checks the hot path on both sides allocates nothing.
func TestNoAllocs(t *testing.T) {
	_, r, q := newRing(t, 256, virtiotest.RingOptions{EventIdx: true, NoKickFD: true})
	r.Notify = func() {}
	frame := [][]byte{make([]byte, 64)}
	var dst []byte = make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		r.AddChain(frame, nil)
		r.Kick()
		c, _, _ := q.Pop()
		q.AddUsed(c.Head, 0)
		q.PublishUsed()
		q.NeedsInterrupt()
		q.EnableNotify()
		for _, u := range r.Used() {
			dst = r.ReadBuf(u, dst[:0])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per chain, want 0", allocs)
	}
}
