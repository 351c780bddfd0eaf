package virtiofs

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
	"tinyvmm/virtio"
	"tinyvmm/virtio/virtiotest"
)

func TestConfigSpace(t *testing.T) {
	dev := &Device{cfg: Config{Tag: "tinyvmm0", RequestQueues: 2}}
	b := make([]byte, TagLen+8)
	dev.ReadConfig(0, b)
	if string(bytes.TrimRight(b[:TagLen], "\x00")) != "tinyvmm0" || binary.LittleEndian.Uint32(b[TagLen:]) != 2 {
		t.Fatalf("config %x", b)
	}
	if got := dev.QueueMaxSizes(); len(got) != 3 {
		t.Fatalf("queues %v: want hiprio and 2 request queues", got)
	}
	if _, err := New(Config{Tag: "this-tag-is-longer-than-thirty-six-bytes"}); err == nil {
		t.Fatal("a 40-byte tag was taken")
	}
}

func TestFileOperations(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello"), []byte("hello, world"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	g := newGuest(t, dir, false)

	f := g.mustLookup(rootID, "hello")
	if f.size != 12 || f.mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("hello: %+v", f)
	}
	fh, e := g.open(f.node, unix.O_RDONLY)
	if e != 0 {
		t.Fatal(e)
	}
	if b, e := g.read(f.node, fh, 7, 100); e != 0 || string(b) != "world" {
		t.Fatalf("read: %q %v", b, e)
	}

	sub := g.mustLookup(rootID, "sub")
	n, fh2, e := g.create(sub.node, "new", unix.O_RDWR, 0o640)
	if e != 0 {
		t.Fatal(e)
	}
	if w, e := g.write(n.node, fh2, 0, []byte("abcdef")); e != 0 || w != 6 {
		t.Fatalf("write: %d %v", w, e)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub/new")); string(b) != "abcdef" {
		t.Fatalf("host sees %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub/new")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640 whatever the host's umask", fi.Mode())
	}
	if e := g.truncate(n.node, 3); e != 0 {
		t.Fatal(e)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub/new")); string(b) != "abc" {
		t.Fatalf("after truncate the host sees %q", b)
	}

	if _, e := g.mkdir(rootID, "d", 0o700); e != 0 {
		t.Fatal(e)
	}
	if e := g.rename(sub.node, "new", rootID, "moved"); e != 0 {
		t.Fatal(e)
	}
	// The node follows its file: the open-by-node after the rename works.
	if _, e := g.open(n.node, unix.O_RDONLY); e != 0 {
		t.Fatalf("open after rename: %v", e)
	}
	if e := g.symlink(rootID, "ln", "/etc/passwd"); e != 0 {
		t.Fatal(e)
	}
	ln := g.mustLookup(rootID, "ln")
	if e, b := g.do(opReadlink, ln.node, 4096); e != 0 || string(b) != "/etc/passwd" {
		t.Fatalf("readlink %q %v", b, e)
	}
	for _, plus := range []bool{false, true} {
		names := g.readdir(rootID, plus)
		slices.Sort(names)
		if want := []string{".", "..", "d", "hello", "ln", "moved", "sub"}; !slices.Equal(names, want) {
			t.Fatalf("readdir(plus=%v): %q, want %q", plus, names, want)
		}
	}
	if e, _ := g.do(opUnlink, rootID, 4096, "moved"); e != 0 {
		t.Fatal(e)
	}
	if e, _ := g.do(opRmdir, rootID, 4096, "d"); e != 0 {
		t.Fatal(e)
	}
	if e, b := g.do(opStatfs, rootID, 4096); e != 0 || len(b) != 80 {
		t.Fatalf("statfs: %v, %d bytes", e, len(b))
	}
	if _, err := os.Stat(filepath.Join(dir, "moved")); !os.IsNotExist(err) {
		t.Fatalf("unlinked file still there: %v", err)
	}
}

// TestManyEntries lists a directory bigger than one READDIRPLUS reply.
func TestManyEntries(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 300; i++ {
		os.WriteFile(filepath.Join(dir, "file"+itoa(i)), nil, 0o644)
	}
	g := newGuest(t, dir, false)
	for _, plus := range []bool{false, true} {
		if n := len(g.readdir(rootID, plus)); n != 302 {
			t.Fatalf("plus=%v: %d entries, want 302", plus, n)
		}
	}
}

func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	g := newGuest(t, dir, true)
	f := g.mustLookup(rootID, "f")
	if _, e := g.open(f.node, unix.O_RDWR); e != unix.EROFS {
		t.Fatalf("open for writing: %v, want EROFS", e)
	}
	if _, _, e := g.create(rootID, "g", unix.O_RDWR, 0o644); e != unix.EROFS {
		t.Fatalf("create: %v", e)
	}
	if e := g.chmod(f.node, 0o777); e != unix.EROFS {
		t.Fatalf("chmod: %v", e)
	}
	if e, _ := g.do(opUnlink, rootID, 4096, "f"); e != unix.EROFS {
		t.Fatalf("unlink: %v", e)
	}
	if fh, e := g.open(f.node, unix.O_RDONLY); e != 0 {
		t.Fatal(e)
	} else if b, _ := g.read(f.node, fh, 0, 10); string(b) != "x" {
		t.Fatalf("read %q", b)
	}
}

// TestFIFOReaderDoesNotStall: a read blocked on a FIFO with no data holds
// one request, not the queue; another reader of the same share is served
// meanwhile, and the blocked read completes when data comes.
func TestFIFOReaderDoesNotStall(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "file"), []byte("data"), 0o644)
	g := newGuest(t, dir, false)
	fifo := g.mustLookup(rootID, "fifo")
	ffh, e := g.open(fifo.node, unix.O_RDONLY)
	if e != 0 {
		t.Fatal(e)
	}
	// A writer that writes nothing yet: the read waits for data, not EOF.
	w, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	blocked := g.request(opRead, fifo.node, readIn(ffh, 0, 100)...)
	head := g.post(blocked, 100+outHeaderLen)

	f := g.mustLookup(rootID, "file")
	fh, e := g.open(f.node, unix.O_RDONLY)
	if e != 0 {
		t.Fatal(e)
	}
	if b, e := g.read(f.node, fh, 0, 100); e != 0 || string(b) != "data" {
		t.Fatalf("the other reader got %q %v", b, e)
	}
	if _, ok := g.wait(head, 0); ok {
		t.Fatal("the FIFO read returned before anything was written")
	}
	w.Write([]byte("late"))
	r, ok := g.wait(head, 10*time.Second)
	if !ok {
		t.Fatal("the FIFO read did not return after the write")
	}
	if e, b := g.check(blocked, r); e != 0 || string(b) != "late" {
		t.Fatalf("FIFO read: %q %v", b, e)
	}
}

// TestResetWakesBlockedRead: a reset does not wait for a FIFO's writer.
func TestResetWakesBlockedRead(t *testing.T) {
	dir := t.TempDir()
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	g := newGuest(t, dir, false)
	fifo := g.mustLookup(rootID, "fifo")
	ffh, _ := g.open(fifo.node, unix.O_RDONLY)
	w, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	g.post(g.request(opRead, fifo.node, readIn(ffh, 0, 100)...), 200)
	time.Sleep(50 * time.Millisecond) // let it reach the read (it passes either way)
	done := make(chan struct{})
	go func() { g.dev.Reset(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Reset is stuck behind a FIFO read")
	}
}

// TestReplyStaysInItsChain: a READ asking for more than the chain holds,
// and a chain bigger than MaxReply, get an error or a bounded reply, never
// bytes past their room.
func TestReplyStaysInItsChain(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("z"), 3<<20), 0o644)
	g := newGuest(t, dir, false)
	f := g.mustLookup(rootID, "big")
	fh, _ := g.open(f.node, unix.O_RDONLY)

	// 4096 bytes asked, 1000 of room.
	req := g.request(opRead, f.node, readIn(fh, 0, 4096)...)
	r, ok := g.wait(g.post(req, 1000), 10*time.Second)
	if !ok || len(r) > 1000 {
		t.Fatalf("reply of %d bytes in 1000 of room", len(r))
	}
	if e, _ := g.check(req, r); e == 0 {
		t.Fatal("a read bigger than its room succeeded")
	}
	// 2 MiB asked with 2 MiB of room: more than MaxReply, refused.
	req = g.request(opRead, f.node, readIn(fh, 0, 2<<20)...)
	r, _ = g.wait(g.post(req, 2<<20+outHeaderLen), 10*time.Second)
	if e, _ := g.check(req, r); e == 0 {
		t.Fatal("a 2 MiB read was served")
	}
	// A request bigger than MaxRequest: E2BIG.
	big := make([]byte, MaxRequest+1)
	req = g.request(opWrite, f.node, fh, uint64(0), uint32(len(big)), uint32(0), uint64(0), uint32(0), uint32(0), big)
	r, _ = g.wait(g.post(req, 4096), 10*time.Second)
	if e, _ := g.check(req, r); e != unix.E2BIG {
		t.Fatalf("oversized write: %v, want E2BIG", e)
	}
	// The device still serves.
	if b, e := g.read(f.node, fh, 0, 4); e != 0 || string(b) != "zzzz" {
		t.Fatalf("after: %q %v", b, e)
	}
}

// BenchmarkRoundTrip is one GETATTR through the ring and back: the
// device's latency per request, kick to interrupt, as a walk of a tree
// pays it once per directory listing page.
func BenchmarkRoundTrip(b *testing.B) {
	g := newGuest(b, b.TempDir(), false)
	req := g.request(opGetattr, rootID, uint32(0), uint32(0), uint64(0))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		head := g.post(req, 200)
		for done := false; !done; {
			runtime.Gosched() // the device's interrupt is not what this times
			g.mu.Lock()
			for _, u := range g.rq.Used() {
				done = done || uint16(u.ID) == head
			}
			g.mu.Unlock()
		}
	}
}

// TestHandleLimit: a guest that opens without releasing gets EMFILE past
// MaxHandles, and the files it had stay usable.
func TestHandleLimit(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	sh, err := sharefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	dev, _ := New(Config{Tag: "t", Share: sh})
	s, err := newSession(dev, virtio.Activation{Queues: []*virtio.Queue{nil, nil}, Kicks: []int{-1, -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	g := &guest{t: t}
	call := func(req []byte) (unix.Errno, []byte) {
		out := make([]byte, 4096)
		n, _ := s.handle([]virtio.Desc{{Buf: req}, {Write: true, Buf: out}})
		return g.check(req, out[:n])
	}
	call(g.request(opInit, 0, uint32(7), uint32(31), uint32(0), uint32(0)))
	if e, _ := call(g.request(opLookup, rootID, "f")); e != 0 {
		t.Fatal(e)
	}
	for i := 0; i < MaxHandles; i++ {
		if e, _ := call(g.request(opOpen, 2, uint32(unix.O_RDONLY), uint32(0))); e != 0 {
			t.Fatalf("open %d: %v", i, e)
		}
	}
	if e, _ := call(g.request(opOpen, 2, uint32(unix.O_RDONLY), uint32(0))); e != unix.EMFILE {
		t.Fatalf("open past the limit: %v, want EMFILE", e)
	}
	if e, b := call(g.request(opRead, 2, readIn(1, 0, 10)...)); e != 0 || string(b) != "x" {
		t.Fatalf("read of the first handle: %q %v", b, e)
	}
}

// TestRequestQueues: each request queue is served, its replies go back on
// its own ring, and the stats count the requests per queue (what shows a
// multi-queue guest spreading its readers).
func TestRequestQueues(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644)
	share, err := sharefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer share.Close()
	dev, err := New(Config{Tag: "share0", Share: share, RequestQueues: 3, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(dev.QueueMaxSizes()); n != 4 {
		t.Fatalf("%d queues offered, want hiprio and 3", n)
	}
	drv := virtiotest.New(16 << 20)
	hi, err := drv.NewQueue(16, virtiotest.RingOptions{BufSize: 4096, EventIdx: true})
	if err != nil {
		t.Fatal(err)
	}
	var rings []*virtiotest.Ring
	for range 3 {
		rq, err := drv.NewQueue(64, virtiotest.RingOptions{BufSize: bufSize, EventIdx: true})
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, rq)
	}
	if err := dev.Activate(drv.Activation(dev.Features(), hi, rings[0], rings[1], rings[2])); err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	defer dev.Reset()
	g := func(i int) *guest {
		return &guest{t: t, drv: drv, hi: hi, rq: rings[i], dev: dev, unique: uint64(i) << 32, replies: map[uint16][]byte{}}
	}
	g(0).init()
	g(2).mustLookup(rootID, "f")
	g(2).mustLookup(rootID, "f")
	g(1).mustLookup(rootID, "f")
	if got := dev.Stats().Queues; !slices.Equal(got, []uint64{0, 1, 1, 2}) {
		t.Fatalf("requests per queue %v, want [0 1 1 2]", got)
	}
}

// TestReadTime: the device sums the time it spends on READs.
func TestReadTime(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 8192), 0o644)
	g := newGuest(t, dir, false)
	f := g.mustLookup(rootID, "f")
	fh, e := g.open(f.node, unix.O_RDONLY)
	if e != 0 {
		t.Fatal(e)
	}
	if st := g.dev.Stats(); st.ReadNanos != 0 {
		t.Fatalf("%d ns of READs before any", st.ReadNanos)
	}
	if b, e := g.read(f.node, fh, 0, 8192); e != 0 || len(b) != 8192 {
		t.Fatalf("read: %d bytes, %v", len(b), e)
	}
	if st := g.dev.Stats(); st.ReadNanos == 0 || st.Ops["READ"] != 1 {
		t.Fatalf("after a READ: %d ns over %d READs", st.ReadNanos, st.Ops["READ"])
	}
}
