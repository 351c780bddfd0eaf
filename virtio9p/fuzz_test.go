package virtio9p

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"tinyvmm/sharefs"
)

// FuzzRequest feeds arbitrary bytes to the device as one request, the way
// they arrive through the ring (split over two readable buffers), after a
// real mount. Whatever comes, the reply is one whole message with the
// request's tag that fits the room given, the device keeps serving, and
// nothing outside the share changes.
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
	f.Fuzz(func(t *testing.T, req []byte, room uint16, split uint8) {
		base := t.TempDir()
		dir := filepath.Join(base, "share")
		os.Mkdir(dir, 0o755)
		sentinel := filepath.Join(base, "sentinel")
		os.WriteFile(sentinel, []byte("keep"), 0o644)
		s, err := sharefs.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		g := newGuest(t, s)
		g.mount()

		var reply []byte
		if len(req) > 0 && len(req) <= 2*bufSize && room > 0 {
			cut := int(split) % len(req)
			out := [][]byte{req[:cut], req[cut:]}
			if cut == 0 {
				out = out[1:]
			}
			reply = g.exchangeBufs(out, int(room))
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
		if typ, _ := header(t, g.exchange(tversion(0xffff, testSize), testSize)); typ != msgRversion {
			t.Fatalf("after %x the device no longer answers Tversion (type %d)", req, typ)
		}
		if b, err := os.ReadFile(sentinel); err != nil || string(b) != "keep" {
			t.Fatalf("the file outside the share changed: %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(base); len(ents) != 2 {
			t.Fatalf("something was made outside the share: %v", ents)
		}
		if f := g.drv.Failures(); len(f) != 0 {
			t.Fatalf("device failed: %v", f)
		}
	})
}
