package virtio9p

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"tinyvmm/sharefs"
	"tinyvmm/virtio/virtiotest"
)

// FuzzRequest feeds arbitrary bytes to the device as one request, the way
// they arrive through the ring (split over two readable buffers), after a
// real mount. Whatever comes, the reply is one whole message with the
// request's tag that fits the room given, the device keeps serving, and
// nothing outside the share changes.
//
// Each input gets a fresh device, ring and 9P session, so a failure
// replays from its input alone; the share directory (emptied between
// inputs) and the Share are made once per process, which keeps an input
// to a few exchanges and no temporary directory or file system set-up.
func FuzzRequest(f *testing.F) {
	f.Add(tgetattr(3, 1), uint16(200), uint8(2))
	f.Add(msg(110, 4, uint32(1), uint32(2), uint16(1), ".."), uint16(200), uint8(9))
	f.Add(msg(110, 4, uint32(1), uint32(2), uint16(2), "a", "b"), uint16(100), uint8(0))
	f.Add(msg(14, 5, uint32(1), "f", uint32(2), uint32(0o644), uint32(0)), uint16(300), uint8(7)) // Tlcreate
	f.Add(msg(16, 6, uint32(1), "ln", "/etc", uint32(0)), uint16(300), uint8(7))                  // Tsymlink
	f.Add(msg(74, 7, uint32(1), "ln", uint32(1), "x"), uint16(300), uint8(7))                     // Trenameat
	f.Add(msg(118, 8, uint32(1), uint32(0), uint32(1000)), uint16(4096), uint8(3))                // Twrite on a dir
	f.Add(msg(40, 9, uint32(1), uint64(0), uint32(8192)), uint16(8192), uint8(3))                 // Treaddir unopened
	f.Add(msg(12, 10, uint32(1), uint32(0)), uint16(100), uint8(3))                               // Tlopen root
	f.Add(tversion(11, 7), uint16(100), uint8(3))
	f.Add(msg(108, 12, uint16(12)), uint16(100), uint8(3)) // Tflush of itself
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 100, 1, 0}, uint16(100), uint8(1))
	f.Add(msg(msgTxattrcreate, 13, uint32(1), "user.x", uint64(1)<<62, uint32(0)), uint16(100), uint8(5))
	f.Add(msg(26, 14, uint32(1), uint32(6), uint32(0), uint32(54321), uint32(54321), uint64(0), uint64(0), uint64(0), uint64(0), uint64(0)), uint16(100), uint8(5)) // Tsetattr chown

	base := f.TempDir()
	dir := filepath.Join(base, "share")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	sentinel := filepath.Join(base, "sentinel")
	if err := os.WriteFile(sentinel, []byte("keep"), 0o644); err != nil {
		f.Fatal(err)
	}
	s, err := sharefs.Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	// Room for a request in up to 3 buffers and a reply of up to 64 KiB
	// in 16: a ring of 32 descriptors, each with a bufSize buffer, and
	// its rings and the unused first page.
	const qsize, mem = 32, 32*bufSize + 4*virtiotest.PageSize

	f.Fuzz(func(t *testing.T, req []byte, room uint16, split uint8) {
		emptyDir(t, dir)
		g := newGuestSized(t, s, qsize, mem)
		// The mount, the request and a Tversion after it, posted at
		// once: the device serves them in order, and one kick and one
		// wait for all keep the input cheap.
		chains := []chain{{out: [][]byte{tversion(0xffff, testSize)}, room: 100}, {out: [][]byte{tattach(1, 1)}, room: 100}}
		sent := len(req) > 0 && len(req) <= 2*bufSize && room > 0
		if sent {
			// Two pieces cut where the input says, each in buffers of
			// at most bufSize.
			cut := int(split) % len(req)
			var out [][]byte
			for _, p := range [][]byte{req[:cut], req[cut:]} {
				for len(p) > 0 {
					n := min(len(p), bufSize)
					out = append(out, p[:n])
					p = p[n:]
				}
			}
			chains = append(chains, chain{out: out, room: int(room)})
		}
		chains = append(chains, chain{out: [][]byte{tversion(0xfffe, testSize)}, room: 100})
		replies := g.exchangeChains(chains)
		if typ, _ := header(t, replies[0]); typ != msgRversion {
			t.Fatalf("Tversion answered with type %d", typ)
		}
		if typ, _ := header(t, replies[1]); typ != 105 {
			t.Fatalf("Tattach answered with type %d", typ)
		}
		var reply []byte
		if sent {
			reply = replies[2]
		}
		if len(reply) > int(room) {
			t.Fatalf("reply of %d bytes in %d of room", len(reply), room)
		}
		if len(reply) > 0 {
			_, tag := header(t, reply)
			if len(req) < headerLen || tag != binary.LittleEndian.Uint16(req[5:]) {
				t.Fatalf("reply tag %d for request %x", tag, req)
			}
		}
		if typ, tag := header(t, replies[len(replies)-1]); typ != msgRversion || tag != 0xfffe {
			t.Fatalf("after %x the device no longer answers Tversion (type %d tag %d)", req, typ, tag)
		}
		if b, err := os.ReadFile(sentinel); err != nil || string(b) != "keep" {
			t.Fatalf("the file outside the share changed: %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(base); len(ents) != 2 {
			t.Fatalf("something was made outside the share: %v", ents)
		}
		if st, err := os.Stat(dir); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Fatalf("the share's root changed owner: %v", err)
		}
		if f := g.drv.Failures(); len(f) != 0 {
			t.Fatalf("device failed: %v", f)
		}
	})
}

// emptyDir removes what an earlier input made in dir, so that each input
// starts from an empty share.
func emptyDir(t *testing.T, dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		os.Chmod(dir, 0o755) // an input may have taken the mode away
		if ents, err = os.ReadDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			// A directory whose mode the input took away: give it back.
			filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
				if d != nil && d.IsDir() {
					os.Chmod(q, 0o755)
				}
				return nil
			})
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}
