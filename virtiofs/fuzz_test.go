package virtiofs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
	"tinyvmm/virtio"
)

// fuzzTarget is one session kept across the fuzzer's inputs (a fresh one
// per input would cost more than the request), over a share with files,
// a directory, a symlink out and a FIFO, next to a file that must never
// change.
var fuzzTarget struct {
	once     sync.Once
	s        *session
	base     string
	sentinel string
	err      error
}

func fuzzSession(t *testing.T) *session {
	ft := &fuzzTarget
	ft.once.Do(func() {
		ft.base, ft.err = os.MkdirTemp("", "virtiofs-fuzz-")
		if ft.err != nil {
			return
		}
		share := filepath.Join(ft.base, "share")
		os.Mkdir(share, 0o755)
		os.WriteFile(filepath.Join(share, "f"), []byte("file"), 0o644)
		os.Mkdir(filepath.Join(share, "d"), 0o755)
		os.Symlink("../sentinel", filepath.Join(share, "ln"))
		unix.Mkfifo(filepath.Join(share, "fifo"), 0o644)
		ft.sentinel = filepath.Join(ft.base, "sentinel")
		os.WriteFile(ft.sentinel, []byte("keep"), 0o600)
		sh, err := sharefs.Open(share)
		if err != nil {
			ft.err = err
			return
		}
		dev, err := New(Config{Tag: "fuzz", Share: sh})
		if err != nil {
			ft.err = err
			return
		}
		a := virtio.Activation{Queues: []*virtio.Queue{nil, nil}, Kicks: []int{-1, -1}}
		ft.s, ft.err = newSession(dev, a)
		if ft.err != nil {
			return
		}
		// INIT, then look up the share's names so that node ids 2-5 and
		// a few handles exist for the inputs to hit.
		g := &guest{t: t}
		for _, req := range [][]byte{
			g.request(opInit, 0, uint32(7), uint32(31), uint32(128<<10), uint32(0x3fffffff), uint32(0), [11]uint32{}),
			g.request(opLookup, rootID, "f"), g.request(opLookup, rootID, "d"),
			g.request(opLookup, rootID, "ln"), g.request(opLookup, rootID, "fifo"),
			g.request(opOpen, 2, uint32(unix.O_RDWR), uint32(0)),
			g.request(opOpendir, rootID, uint32(0), uint32(0)),
		} {
			ft.s.handle([]virtio.Desc{{Buf: req}, {Write: true, Buf: make([]byte, 4096)}})
		}
	})
	if ft.err != nil {
		t.Fatal(ft.err)
	}
	return ft.s
}

// FuzzRequest feeds arbitrary bytes to the device as one request, the way
// they arrive in a chain (split over two readable buffers, with room
// bytes of writable room). Whatever comes, the reply fits its room, is
// one whole reply with the request's unique, the device keeps answering,
// and nothing outside the share changes.
func FuzzRequest(f *testing.F) {
	g := &guest{t: f}
	seeds := [][]byte{
		g.request(opLookup, rootID, "f"),
		g.request(opLookup, rootID, ".."),
		g.request(opLookup, 4, "x"),
		g.request(opGetattr, 2, uint32(1), uint32(0), uint64(1)),
		g.request(opSetattr, 2, setattrIn(1, 0, 0o4777)...),
		g.request(opSetattr, 4, setattrIn(1<<3, 0, 0)...),
		g.request(opOpen, 4, uint32(unix.O_RDWR), uint32(0)),
		g.request(opRead, 2, readIn(1, 0, 4096)...),
		g.request(opRead, 2, readIn(1, 0, 1<<31)...),
		g.request(opWrite, 2, uint64(1), uint64(0), uint32(100), uint32(0), uint64(0), uint32(0), uint32(0), []byte("short")),
		g.request(opCreate, rootID, uint32(unix.O_RDWR), uint32(0o4755), uint32(0), uint32(0), "new"),
		g.request(opMknod, rootID, uint32(unix.S_IFCHR|0o666), uint32(0x103), uint32(0), uint32(0), "dev"),
		g.request(opMkdir, rootID, uint32(0o755), uint32(0), "dir"),
		g.request(opSymlink, rootID, "sl", "/etc"),
		g.request(opLink, rootID, uint64(4), "hard"),
		g.request(opRename2, rootID, uint64(rootID), uint32(0), uint32(0), "f", "g"),
		g.request(opRename, rootID, uint64(3), "f"),
		g.request(opUnlink, rootID, "new"),
		g.request(opReaddirplus, rootID, readIn(2, 0, 4096)...),
		g.request(opReaddir, rootID, readIn(2, 0, 100)...),
		g.request(opReaddirplus, 3, readIn(0, 0, 4096)...), // no handle (CacheAlways)
		g.request(opFsyncdir, 3, uint64(0), uint32(0), uint32(0)),
		g.request(opReadlink, 4),
		g.request(opStatfs, rootID),
		g.request(opInit, 0, uint32(7), uint32(5)),
		g.request(opForget, 2, uint64(1)),
		g.request(42, 0, uint32(1000), uint32(0), uint64(2), uint64(1)), // BATCH_FORGET, count lies
		g.request(opRelease, 2, uint64(1), uint32(0), uint32(0), uint64(0)),
		{0xff, 0xff, 0xff, 0xff},
	}
	for i, s := range seeds {
		f.Add(s, uint16(4096), uint8(i*7))
		f.Add(s, uint16(17), uint8(i))
	}
	f.Fuzz(func(t *testing.T, req []byte, room uint16, split uint8) {
		s := fuzzSession(t)
		bufs := []virtio.Desc{}
		if len(req) > 0 {
			cut := int(split) % len(req)
			if cut > 0 {
				bufs = append(bufs, virtio.Desc{Buf: req[:cut]})
			}
			bufs = append(bufs, virtio.Desc{Buf: req[cut:]})
		}
		// The room lies between two guard areas that must stay zero.
		mem := make([]byte, int(room)+64)
		out := mem[32 : 32+int(room)]
		if room > 0 {
			bufs = append(bufs, virtio.Desc{Write: true, Buf: out[:len(out)/2]}, virtio.Desc{Write: true, Buf: out[len(out)/2:]})
		}
		// A read that waits on the FIFO for a writer the inputs made is
		// legitimate; closing the open files ends it.
		// split's top bit picks the cache policy the input meets: under
		// CacheAlways, OPENDIR is refused and READDIR has no handle.
		s.fs.cache = Cache(split >> 7)
		stuck := time.AfterFunc(5*time.Second, s.fs.closeAll)
		n, _ := s.handle(bufs)
		stuck.Stop()
		s.fs.cache = CacheAuto
		if n < 0 || n > int(room) {
			t.Fatalf("reply of %d bytes in %d of room", n, room)
		}
		for i, b := range mem {
			if (i < 32 || i >= 32+int(room)) && b != 0 {
				t.Fatalf("byte %d written outside the room", i)
			}
		}
		if n > 0 {
			if n < outHeaderLen || int(binary.LittleEndian.Uint32(out)) != n {
				t.Fatalf("reply %x: not one whole reply", out[:n])
			}
			if len(req) >= inHeaderLen && binary.LittleEndian.Uint64(out[8:]) != binary.LittleEndian.Uint64(req[8:]) {
				t.Fatalf("reply unique %d for request %x", binary.LittleEndian.Uint64(out[8:]), req[:inHeaderLen])
			}
		}
		probe := g.request(opGetattr, rootID, uint32(0), uint32(0), uint64(0))
		reply := make([]byte, 4096)
		if n, _ := s.handle([]virtio.Desc{{Buf: probe}, {Write: true, Buf: reply}}); n < outHeaderLen || reply[4] != 0 {
			t.Fatalf("after %x the device no longer answers GETATTR of the root: %x", req, reply[:n])
		}
		if b, err := os.ReadFile(fuzzTarget.sentinel); err != nil || string(b) != "keep" {
			t.Fatalf("the file outside the share changed: %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(fuzzTarget.base); len(ents) != 2 {
			t.Fatalf("something was made outside the share: %v", ents)
		}
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fuzzTarget.base != "" {
		os.RemoveAll(fuzzTarget.base)
	}
	os.Exit(code)
}
