package virtiofs

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
	"tinyvmm/virtio/virtiotest"
)

// FUSE opcodes the test driver sends.
const (
	opLookup      = 1
	opGetattr     = 3
	opSetattr     = 4
	opReadlink    = 5
	opSymlink     = 6
	opMknod       = 8
	opMkdir       = 9
	opUnlink      = 10
	opRmdir       = 11
	opRename      = 12
	opLink        = 13
	opOpen        = 14
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opOpendir     = 27
	opReaddir     = 28
	opCreate      = 35
	opReaddirplus = 44
	opFsyncdir    = 30
	opRename2     = 45

	bufSize = 64 << 10
	rootID  = 1
)

// guest plays the Linux virtio-fs driver: each request is one chain of
// readable buffers (header and arguments), then writable ones with room
// for the reply.
type guest struct {
	t   testing.TB
	drv *virtiotest.Driver
	hi  *virtiotest.Ring
	rq  *virtiotest.Ring
	dev *Device

	mu      sync.Mutex
	unique  uint64
	replies map[uint16][]byte
}

func newGuest(t testing.TB, dir string, readOnly bool) *guest {
	t.Helper()
	share, err := sharefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := New(Config{Tag: "share0", Share: share, ReadOnly: readOnly, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	g := startGuest(t, dev)
	t.Cleanup(func() { share.Close() })
	return g
}

func startGuest(t testing.TB, dev *Device) *guest {
	t.Helper()
	drv := virtiotest.New(16 << 20)
	hi, err := drv.NewQueue(16, virtiotest.RingOptions{BufSize: 4096, EventIdx: true})
	if err != nil {
		t.Fatal(err)
	}
	rq, err := drv.NewQueue(64, virtiotest.RingOptions{BufSize: bufSize, EventIdx: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Activate(drv.Activation(dev.Features(), hi, rq)); err != nil {
		t.Fatal(err)
	}
	g := &guest{t: t, drv: drv, hi: hi, rq: rq, dev: dev, replies: map[uint16][]byte{}}
	t.Cleanup(func() {
		dev.Reset()
		drv.Close()
	})
	g.init()
	return g
}

// request encodes a FUSE request: the header, then each argument (integers
// little-endian, strings NUL-terminated, byte slices as they are).
func (g *guest) request(op uint32, node uint64, args ...any) []byte {
	g.mu.Lock()
	g.unique++
	u := g.unique
	g.mu.Unlock()
	var b bytes.Buffer
	b.Write(make([]byte, inHeaderLen))
	for _, a := range args {
		switch a := a.(type) {
		case string:
			b.WriteString(a)
			b.WriteByte(0)
		case []byte:
			b.Write(a)
		default:
			binary.Write(&b, binary.LittleEndian, a)
		}
	}
	m := b.Bytes()
	binary.LittleEndian.PutUint32(m, uint32(len(m)))
	binary.LittleEndian.PutUint32(m[4:], op)
	binary.LittleEndian.PutUint64(m[8:], u)
	binary.LittleEndian.PutUint64(m[16:], node)
	return m
}

// post puts a request on the request queue with room bytes for the reply
// and returns its chain's head.
func (g *guest) post(req []byte, room int) uint16 {
	g.t.Helper()
	var out [][]byte
	for len(req) > 0 {
		n := min(len(req), bufSize)
		out = append(out, req[:n])
		req = req[n:]
	}
	var in []uint32
	for room > 0 {
		n := min(room, bufSize)
		in = append(in, uint32(n))
		room -= n
	}
	g.mu.Lock()
	head, err := g.rq.AddChain(out, in)
	g.rq.Kick()
	g.mu.Unlock()
	if err != nil {
		g.t.Fatal(err)
	}
	return head
}

// wait returns the reply to the chain at head, or fails after timeout.
func (g *guest) wait(head uint16, timeout time.Duration) ([]byte, bool) {
	deadline := time.Now().Add(timeout)
	for {
		g.mu.Lock()
		for _, u := range g.rq.Used() {
			g.replies[uint16(u.ID)] = g.rq.ReadBuf(u, []byte{})
		}
		r, ok := g.replies[head]
		delete(g.replies, head)
		g.mu.Unlock()
		if ok {
			return r, true
		}
		if time.Now().After(deadline) {
			return nil, false
		}
		g.rq.Irq.Wait(5 * time.Millisecond)
	}
}

// do sends one request and returns the reply's error (a positive errno)
// and body.
func (g *guest) do(op uint32, node uint64, room int, args ...any) (unix.Errno, []byte) {
	g.t.Helper()
	req := g.request(op, node, args...)
	r, ok := g.wait(g.post(req, room), 10*time.Second)
	if !ok {
		g.t.Fatalf("op %d: no reply within 10 s (device failures: %v)", op, g.drv.Failures())
	}
	return g.check(req, r)
}

// check parses a reply to req: one whole message with req's unique.
func (g *guest) check(req, r []byte) (unix.Errno, []byte) {
	g.t.Helper()
	if len(r) < outHeaderLen || int(binary.LittleEndian.Uint32(r)) != len(r) {
		g.t.Fatalf("reply %x: not one whole FUSE reply", r)
	}
	if u := binary.LittleEndian.Uint64(r[8:]); u != binary.LittleEndian.Uint64(req[8:]) {
		g.t.Fatalf("reply unique %d for request %d", u, binary.LittleEndian.Uint64(req[8:]))
	}
	return unix.Errno(-int32(binary.LittleEndian.Uint32(r[4:]))), r[outHeaderLen:]
}

func (g *guest) init() {
	g.t.Helper()
	// major, minor, max_readahead, flags (CAP_READDIRPLUS|CAP_MAX_PAGES|...)
	e, _ := g.do(opInit, 0, 4096, uint32(7), uint32(31), uint32(128<<10), uint32(0x3fffffff), uint32(0), [11]uint32{})
	if e != 0 {
		g.t.Fatalf("INIT: %v", e)
	}
}

// entry is what LOOKUP and friends return.
type entry struct {
	node uint64
	ino  uint64
	size uint64
	mode uint32
}

func parseEntry(b []byte) entry {
	return entry{node: binary.LittleEndian.Uint64(b), ino: binary.LittleEndian.Uint64(b[40:]),
		size: binary.LittleEndian.Uint64(b[48:]), mode: binary.LittleEndian.Uint32(b[100:])}
}

func (g *guest) lookup(parent uint64, name string) (entry, unix.Errno) {
	e, b := g.do(opLookup, parent, 4096, name)
	if e != 0 {
		return entry{}, e
	}
	return parseEntry(b), 0
}

func (g *guest) mustLookup(parent uint64, name string) entry {
	g.t.Helper()
	en, e := g.lookup(parent, name)
	if e != 0 {
		g.t.Fatalf("lookup %q: %v", name, e)
	}
	return en
}

func (g *guest) getattr(node uint64) (uint32, unix.Errno) {
	e, b := g.do(opGetattr, node, 4096, uint32(0), uint32(0), uint64(0))
	if e != 0 {
		return 0, e
	}
	return binary.LittleEndian.Uint32(b[16+60:]), 0
}

func (g *guest) open(node uint64, flags uint32) (uint64, unix.Errno) {
	e, b := g.do(opOpen, node, 4096, flags, uint32(0))
	if e != 0 {
		return 0, e
	}
	return binary.LittleEndian.Uint64(b), 0
}

func readIn(fh, off uint64, size uint32) []any {
	return []any{fh, off, size, uint32(0), uint64(0), uint32(0), uint32(0)}
}

func (g *guest) read(node, fh, off uint64, size uint32) ([]byte, unix.Errno) {
	e, b := g.do(opRead, node, int(size)+outHeaderLen, readIn(fh, off, size)...)
	return b, e
}

func (g *guest) write(node, fh, off uint64, data []byte) (uint32, unix.Errno) {
	e, b := g.do(opWrite, node, 4096, fh, off, uint32(len(data)), uint32(0), uint64(0), uint32(0), uint32(0), data)
	if e != 0 {
		return 0, e
	}
	return binary.LittleEndian.Uint32(b), 0
}

func (g *guest) create(parent uint64, name string, flags, mode uint32) (entry, uint64, unix.Errno) {
	e, b := g.do(opCreate, parent, 4096, flags, mode, uint32(0), uint32(0), name)
	if e != 0 {
		return entry{}, 0, e
	}
	return parseEntry(b), binary.LittleEndian.Uint64(b[128:]), 0
}

func (g *guest) mkdir(parent uint64, name string, mode uint32) (entry, unix.Errno) {
	e, b := g.do(opMkdir, parent, 4096, mode, uint32(0), name)
	if e != 0 {
		return entry{}, e
	}
	return parseEntry(b), 0
}

func (g *guest) mknod(parent uint64, name string, mode, rdev uint32) unix.Errno {
	e, _ := g.do(opMknod, parent, 4096, mode, rdev, uint32(0), uint32(0), name)
	return e
}

func (g *guest) symlink(parent uint64, name, target string) unix.Errno {
	e, _ := g.do(opSymlink, parent, 4096, name, target)
	return e
}

func (g *guest) link(old, newParent uint64, name string) (entry, unix.Errno) {
	e, b := g.do(opLink, newParent, 4096, old, name)
	if e != 0 {
		return entry{}, e
	}
	return parseEntry(b), 0
}

func (g *guest) rename(oldParent uint64, oldName string, newParent uint64, newName string) unix.Errno {
	e, _ := g.do(opRename2, oldParent, 4096, newParent, uint32(0), uint32(0), oldName, newName)
	return e
}

// chmod is SETATTR with FATTR_MODE.
func (g *guest) chmod(node uint64, mode uint32) unix.Errno {
	e, _ := g.do(opSetattr, node, 4096, setattrIn(1, 0, mode)...)
	return e
}

// truncate is SETATTR with FATTR_SIZE.
func (g *guest) truncate(node uint64, size uint64) unix.Errno {
	e, _ := g.do(opSetattr, node, 4096, setattrIn(1<<3, size, 0)...)
	return e
}

func setattrIn(valid uint32, size uint64, mode uint32) []any {
	// valid, padding, fh, size, lock_owner, atime, mtime, ctime,
	// atimensec, mtimensec, ctimensec, mode, unused4, uid, gid, unused5
	return []any{valid, uint32(0), uint64(0), size, uint64(0), uint64(0), uint64(0), uint64(0),
		uint32(0), uint32(0), uint32(0), mode, uint32(0), uint32(0), uint32(0), uint32(0)}
}

// readdir lists a directory with READDIR (names) from offset 0, over as
// many requests as it takes.
func (g *guest) readdir(node uint64, plus bool) []string {
	g.t.Helper()
	e, b := g.do(opOpendir, node, 4096, uint32(unix.O_RDONLY), uint32(0))
	if e != 0 {
		g.t.Fatalf("opendir: %v", e)
	}
	fh := binary.LittleEndian.Uint64(b)
	op := uint32(opReaddir)
	if plus {
		op = opReaddirplus
	}
	var names []string
	off := uint64(0)
	for {
		e, b := g.do(op, node, 1024+outHeaderLen, readIn(fh, off, 1024)...)
		if e != 0 {
			g.t.Fatalf("readdir: %v", e)
		}
		if len(b) == 0 {
			break
		}
		for len(b) > 0 {
			if plus {
				b = b[128:] // the entry_out
			}
			// struct fuse_dirent: ino, off, namelen, type, name, padding to 8.
			off = binary.LittleEndian.Uint64(b[8:])
			nl := int(binary.LittleEndian.Uint32(b[16:]))
			names = append(names, string(b[24:24+nl]))
			b = b[(24+nl+7)&^7:]
		}
	}
	g.do(opRelease+11, node, 4096, fh, uint32(0), uint32(0), uint64(0)) // RELEASEDIR (29)
	return names
}
