package virtio9p

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// 9P2000.L message types the hostile-guest tests send.
const (
	msgTlopen   = 12
	msgRlopen   = 13
	msgTgetattr = 24
	msgRgetattr = 25
	msgTread    = 116
	msgTwrite   = 118
	msgRwrite   = 119
	msgTclunk   = 120
	msgTwalk    = 110
	msgRwalk    = 111
)

func twalk(tag uint16, fid, newfid uint32, names ...string) []byte {
	body := []any{fid, newfid, uint16(len(names))}
	for _, n := range names {
		body = append(body, n)
	}
	return msg(msgTwalk, tag, body...)
}

func wantType(t *testing.T, r []byte, typ uint8, tag uint16) {
	t.Helper()
	gotTyp, gotTag := header(t, r)
	if gotTyp != typ || gotTag != tag {
		t.Fatalf("reply %x: want type %d tag %d", r[:min(len(r), 16)], typ, tag)
	}
}

// TestXattrCreateRefused: p9's server takes any attr_size at Txattrcreate
// and appends every Twrite to that fid to a buffer it hands on only at
// Tclunk, so a fid never clunked grows the VMM's heap without bound. The
// device refuses xattr creation before the server sees it.
func TestXattrCreateRefused(t *testing.T) {
	_, s := shareDir(t)
	g := newGuest(t, s)
	g.mount()
	wantType(t, g.exchange(twalk(2, 1, 2), 200), msgRwalk, 2)
	wantLerror(t, g.exchange(msg(msgTxattrcreate, 3, uint32(2), "user.x", uint64(1)<<62, uint32(0)), 200), 3, uint32(unix.EOPNOTSUPP))
	data := make([]byte, 32<<10)
	for i := range 4 {
		r := g.exchange(msg(msgTwrite, 4, uint32(2), uint64(i*len(data)), uint32(len(data)), data), 200)
		if typ, _ := header(t, r); typ == msgRwrite {
			t.Fatalf("Twrite %d to the xattr fid was taken: %x", i, r)
		}
	}
}

// TestReplyNeverSpills: p9 writes a reply in pieces (header, fixed fields,
// payload). A reply too big for its chain must be consumed whole before
// the next chain is served: its tail is no header for the next one.
func TestReplyNeverSpills(t *testing.T) {
	dir, s := shareDir(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 60000), 0o644); err != nil {
		t.Fatal(err)
	}
	g := newGuest(t, s)
	g.mount()
	wantType(t, g.exchange(twalk(2, 1, 2, "f"), 200), msgRwalk, 2)
	wantType(t, g.exchange(msg(msgTlopen, 3, uint32(2), uint32(0)), 200), msgRlopen, 3)
	rounds := 1000
	if testing.Short() {
		rounds = 100
	}
	for i := range rounds {
		// Both chains posted at once: the device serves the second
		// right after the first, while p9 may still be writing.
		tag := uint16(10 + i%1000)
		r := g.exchangeMany([][]byte{msg(msgTread, tag, uint32(2), uint64(0), uint32(50000)), tgetattr(tag+1, 1)}, []int{100, 200})
		wantLerror(t, r[0], tag, uint32(unix.EMSGSIZE))
		wantType(t, r[1], msgRgetattr, tag+1)
	}
	if f := g.drv.Failures(); len(f) != 0 {
		t.Fatalf("device failed: %v", f)
	}
}

// TestConnFramesReplies drives the conn the way the worker does, writing a
// reply in the pieces p9 uses, and moving on to the next chain as soon as
// the current one is done. An oversized reply's tail must not reach the
// next chain, whenever it arrives.
func TestConnFramesReplies(t *testing.T) {
	c := newConn()
	newReply := func(tag uint16, room int) *reply {
		return &reply{bufs: [][]byte{make([]byte, room)}, capacity: room, tag: tag, done: make(chan struct{})}
	}
	isDone := func(r *reply) bool {
		select {
		case <-r.done:
			return true
		default:
			return false
		}
	}
	// Rread with 50000 bytes of data: header, count, payload.
	big := msg(117, 1, uint32(50000), bytes.Repeat([]byte{0xee}, 50000))
	small := msg(msgRgetattr, 2, bytes.Repeat([]byte{0x11}, 40))

	r1 := newReply(1, 100)
	c.expect(r1)
	var r2 *reply
	pieces := [][]byte{big[:headerLen], big[headerLen : headerLen+4], big[headerLen+4:]}
	for _, p := range pieces {
		if r2 == nil && isDone(r1) {
			r2 = newReply(2, 200) // what the worker does next: the next chain
			c.expect(r2)
		}
		c.Write(p)
	}
	if !isDone(r1) || !r1.overflow {
		t.Fatalf("oversized reply: done %v overflow %v", isDone(r1), r1.overflow)
	}
	if r2 == nil {
		r2 = newReply(2, 200)
		c.expect(r2)
	}
	c.Write(small[:headerLen])
	c.Write(small[headerLen:])
	if !isDone(r2) || r2.overflow || r2.written != len(small) || !bytes.Equal(r2.bufs[0][:len(small)], small) {
		t.Fatalf("the next chain got %x (%d bytes, overflow %v), want %x", r2.bufs[0][:r2.written], r2.written, r2.overflow, small)
	}
}
