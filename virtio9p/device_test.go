package virtio9p

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"

	"tinyvmm/sharefs"
	"tinyvmm/virtio"
	"tinyvmm/virtio/virtiotest"
)

const (
	bufSize  = 4096
	testSize = 64 << 10 // the msize the tests negotiate
)

// guest plays the Linux 9p client's transport: each request is one chain
// of readable buffers, then writable ones with room for the reply.
type guest struct {
	t    testing.TB
	drv  *virtiotest.Driver
	ring *virtiotest.Ring
	dev  *Device
}

func newGuest(t testing.TB, attacher p9.Attacher) *guest {
	t.Helper()
	return newGuestSized(t, attacher, 64, 8<<20)
}

// newGuestSized is newGuest with a queue of qsize entries (each with a
// bufSize buffer) in mem bytes of guest memory.
func newGuestSized(t testing.TB, attacher p9.Attacher, qsize uint16, mem int) *guest {
	t.Helper()
	drv := virtiotest.New(mem)
	ring, err := drv.NewQueue(qsize, virtiotest.RingOptions{BufSize: bufSize, EventIdx: true})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := New("share0", attacher, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Activate(drv.Activation(dev.Features(), ring)); err != nil {
		t.Fatal(err)
	}
	g := &guest{t: t, drv: drv, ring: ring, dev: dev}
	t.Cleanup(func() {
		dev.Reset()
		drv.Close()
	})
	return g
}

// exchange posts req (split into buffers) with capacity bytes of reply room
// and returns what the device wrote (failing the test after 5 s).
func (g *guest) exchange(req []byte, capacity int) []byte {
	g.t.Helper()
	var out [][]byte
	for len(req) > 0 {
		n := min(len(req), bufSize)
		out = append(out, req[:n])
		req = req[n:]
	}
	return g.exchangeBufs(out, capacity)
}

// exchangeBufs is exchange with the readable buffers given.
func (g *guest) exchangeBufs(out [][]byte, capacity int) []byte {
	g.t.Helper()
	return g.exchangeChains([]chain{{out: out, room: capacity}})[0]
}

// exchangeMany posts every request at once, each in one buffer with its
// room for the reply, and returns the replies in the order the device
// used the chains.
func (g *guest) exchangeMany(reqs [][]byte, rooms []int) [][]byte {
	g.t.Helper()
	chains := make([]chain, len(reqs))
	for i, req := range reqs {
		chains[i] = chain{out: [][]byte{req}, room: rooms[i]}
	}
	return g.exchangeChains(chains)
}

// chain is one request: its readable buffers, and the room for the reply
// (in writable buffers of up to bufSize).
type chain struct {
	out  [][]byte
	room int
}

// exchangeChains posts every chain at once, kicks once, and returns the
// replies in the order the device used the chains.
func (g *guest) exchangeChains(chains []chain) [][]byte {
	g.t.Helper()
	for _, c := range chains {
		var in []uint32
		for room := c.room; room > 0; room -= bufSize {
			in = append(in, uint32(min(room, bufSize)))
		}
		if _, err := g.ring.AddChain(c.out, in); err != nil {
			g.t.Fatal(err)
		}
	}
	g.ring.Kick()
	var out [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(out) < len(chains) {
		for _, u := range g.ring.Used() {
			out = append(out, g.ring.ReadBuf(u, []byte{}))
		}
		// Ask for an interrupt at the next used element (used_event),
		// then look again: a reply may have come in between.
		if len(out) == len(chains) || g.ring.EnableInterrupts() {
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			g.t.Fatalf("%d of %d replies within 5 s (device failures: %v)", len(out), len(chains), g.drv.Failures())
		}
		g.ring.Irq.Wait(left)
	}
	return out
}

// msg builds a 9P message with the size field filled in.
func msg(typ uint8, tag uint16, body ...any) []byte {
	var b bytes.Buffer
	b.Write(make([]byte, 4))
	b.WriteByte(typ)
	binary.Write(&b, binary.LittleEndian, tag)
	for _, v := range body {
		switch v := v.(type) {
		case string:
			binary.Write(&b, binary.LittleEndian, uint16(len(v)))
			b.WriteString(v)
		default:
			binary.Write(&b, binary.LittleEndian, v)
		}
	}
	m := b.Bytes()
	binary.LittleEndian.PutUint32(m, uint32(len(m)))
	return m
}

func tversion(tag uint16, msize uint32) []byte { return msg(100, tag, msize, "9P2000.L") }

func tattach(tag uint16, fid uint32) []byte {
	return msg(104, tag, fid, uint32(0xffffffff), "root", "", uint32(0))
}

func tgetattr(tag uint16, fid uint32) []byte { return msg(24, tag, fid, uint64(0x3fff)) }

// header returns a reply's type and tag, failing on a short reply.
func header(t testing.TB, r []byte) (uint8, uint16) {
	t.Helper()
	if len(r) < headerLen || int(binary.LittleEndian.Uint32(r)) != len(r) {
		t.Fatalf("reply %x: not one whole 9P message", r)
	}
	return r[4], binary.LittleEndian.Uint16(r[5:])
}

func wantLerror(t *testing.T, r []byte, tag uint16, errno uint32) {
	t.Helper()
	typ, gotTag := header(t, r)
	if typ != msgRlerror || gotTag != tag || len(r) != rlerrorLen || binary.LittleEndian.Uint32(r[7:]) != errno {
		t.Fatalf("reply %x: want Rlerror tag %d errno %d", r, tag, errno)
	}
}

func shareDir(t *testing.T) (string, *sharefs.Share) {
	dir := t.TempDir()
	s, err := sharefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dir, s
}

func (g *guest) mount() {
	g.t.Helper()
	if typ, _ := header(g.t, g.exchange(tversion(0xffff, testSize), testSize)); typ != msgRversion {
		g.t.Fatalf("Tversion answered with type %d", typ)
	}
	if typ, _ := header(g.t, g.exchange(tattach(1, 1), testSize)); typ != 105 {
		g.t.Fatalf("Tattach answered with type %d", typ)
	}
}

func TestConfigSpace(t *testing.T) {
	_, s := shareDir(t)
	d, err := New("share0", s, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 10)
	d.ReadConfig(0, b)
	if want := []byte{6, 0, 's', 'h', 'a', 'r', 'e', '0', 0, 0}; !bytes.Equal(b, want) {
		t.Fatalf("config %q, want %q", b, want)
	}
	if d.Type() != DeviceID || d.Features()&FeatMountTag == 0 {
		t.Fatalf("type %d features %#x", d.Type(), d.Features())
	}
	for _, bad := range []string{"", "a b", "a,b", "a\x00", string(make([]byte, 300))} {
		if _, err := New(bad, s, nil); err == nil {
			t.Errorf("tag %q accepted", bad)
		}
	}
}

// ringConn lets p9's own client talk to the device through the ring.
type ringConn struct {
	g      *guest
	mu     sync.Mutex
	out    []byte
	in     chan []byte
	inBuf  []byte
	closed chan struct{}
	once   sync.Once
}

func (c *ringConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed: // p9's file finalizers send Clunks after the test (CI panicked on one)
		return 0, io.ErrClosedPipe
	default:
	}
	c.out = append(c.out, p...)
	for len(c.out) >= 4 {
		size := int(binary.LittleEndian.Uint32(c.out))
		if len(c.out) < size {
			break
		}
		m := append([]byte(nil), c.out[:size]...)
		c.out = c.out[size:]
		r := c.g.exchange(m, testSize)
		select {
		case c.in <- r:
		case <-c.closed:
			return 0, io.ErrClosedPipe
		}
	}
	return len(p), nil
}

func (c *ringConn) Read(p []byte) (int, error) {
	if len(c.inBuf) == 0 {
		select {
		case c.inBuf = <-c.in:
		case <-c.closed:
			return 0, io.EOF
		}
	}
	n := copy(p, c.inBuf)
	c.inBuf = c.inBuf[n:]
	return n, nil
}

func (c *ringConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

// TestP9ClientThroughRing runs p9's client against the device: the files
// it makes appear in the host directory, and host files read back.
func TestP9ClientThroughRing(t *testing.T) {
	dir, s := shareDir(t)
	os.WriteFile(filepath.Join(dir, "host.txt"), []byte("from the host"), 0o644)
	g := newGuest(t, s)
	conn := &ringConn{g: g, in: make(chan []byte, 1), closed: make(chan struct{})}
	defer conn.Close()
	client, err := p9.NewClient(conn, p9.WithMessageSize(testSize))
	if err != nil {
		t.Fatal(err)
	}
	root, err := client.Attach("")
	if err != nil {
		t.Fatal(err)
	}
	_, dirf, err := root.Walk(nil)
	if err != nil {
		t.Fatal(err)
	}
	f, _, _, err := dirf.Create("guest.txt", p9.ReadWrite, 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // several messages
	if n, err := f.WriteAt(big, 0); n != len(big) || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	f.Close()
	if got, _ := os.ReadFile(filepath.Join(dir, "guest.txt")); !bytes.Equal(got, big) {
		t.Fatalf("host sees %d bytes, want %d", len(got), len(big))
	}
	_, hf, err := root.Walk([]string{"host.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := hf.Open(p9.ReadOnly); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, err := hf.ReadAt(buf, 0)
	if string(buf[:n]) != "from the host" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, _, err := root.Walk([]string{".."}); err == nil {
		t.Fatal("walk .. succeeded")
	}
	if st := g.dev.Stats(); st.Requests < 8 || st.BytesIn < uint64(len(big)) {
		t.Fatalf("stats %+v", st)
	}
}

// TestMalformedRequests: each bad request gets its own answer (or none when
// there is nothing to answer to), and the session goes on.
func TestMalformedRequests(t *testing.T) {
	_, s := shareDir(t)
	g := newGuest(t, s)
	g.mount()
	lied := tgetattr(7, 1)
	binary.LittleEndian.PutUint32(lied, uint32(len(lied)+100))
	tiny := tgetattr(8, 1)
	binary.LittleEndian.PutUint32(tiny, 3)
	huge := make([]byte, testSize+100)
	copy(huge, tgetattr(9, 1))
	binary.LittleEndian.PutUint32(huge, uint32(len(huge)))
	truncWalk := msg(110, 10, uint32(1), uint32(2), uint16(5), "a") // says 5 names, has 1

	wantLerror(t, g.exchange(lied, 100), 7, 22)      // EINVAL: the size field lies
	wantLerror(t, g.exchange(tiny, 100), 8, 22)      // EINVAL: size below a header
	wantLerror(t, g.exchange(huge, 100), 9, 90)      // EMSGSIZE: above the msize
	wantLerror(t, g.exchange(truncWalk, 100), 10, 5) // the server's EIO for an undecodable body, sent with no tag: ours put back
	if r := g.exchange(msg(250, 11), 100); r[4] != msgRlerror || binary.LittleEndian.Uint16(r[5:]) != 11 {
		t.Fatalf("unknown type: reply %x", r)
	}
	if r := g.exchange(msg(108, 15, uint16(15)), 100); len(r) != headerLen || r[4] != 109 || r[5] != 15 {
		t.Fatalf("Tflush of its own tag: reply %x, want Rflush", r)
	}
	if r := g.exchange([]byte{1, 2, 3}, 100); len(r) != 0 {
		t.Fatalf("3-byte request: reply %x", r)
	}
	if r := g.exchange(tgetattr(12, 1), 5); len(r) != 0 {
		t.Fatalf("no room for a reply: got %x", r)
	}
	// A reply larger than the room given is replaced by an Rlerror.
	wantLerror(t, g.exchange(tgetattr(13, 1), 20), 13, 90)
	if typ, tag := header(t, g.exchange(tgetattr(14, 1), 200)); typ != 25 || tag != 14 {
		t.Fatalf("after the bad requests, Tgetattr got type %d tag %d", typ, tag)
	}
	if f := g.drv.Failures(); len(f) != 0 {
		t.Fatalf("device failed: %v", f)
	}
}

// blockingAttacher blocks Attach until released: a file operation stuck in
// the host.
type blockingAttacher struct {
	p9.Attacher
	release chan struct{}
}

func (b blockingAttacher) Attach() (p9.File, error) {
	<-b.release
	return b.Attacher.Attach()
}

// TestResetWithRequestInFlight: Reset returns while the server is stuck,
// and the late reply never reaches guest memory.
func TestResetWithRequestInFlight(t *testing.T) {
	if raceEnabled {
		// When a request outlives its session, p9 v0.3.0's server loops
		// into pendingWg.Add while Handle's deferred stop is in
		// pendingWg.Wait: library code the race detector flags.
		t.Skip("exercises a WaitGroup misuse inside p9's server under -race; runs without -race")
	}
	_, s := shareDir(t)
	ba := blockingAttacher{Attacher: s, release: make(chan struct{})}
	g := newGuest(t, ba)
	if typ, _ := header(t, g.exchange(tversion(0xffff, testSize), testSize)); typ != msgRversion {
		t.Fatal("no Rversion")
	}
	if _, err := g.ring.AddChain([][]byte{tattach(1, 1)}, []uint32{bufSize}); err != nil {
		t.Fatal(err)
	}
	g.ring.Kick()
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { g.dev.Reset(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Reset waited for a stuck server call")
	}
	before := append([]byte(nil), g.drv.Mem...)
	close(ba.release)
	time.Sleep(50 * time.Millisecond)
	if !bytes.Equal(before, g.drv.Mem) {
		t.Fatal("a reply reached guest memory after Reset")
	}
	if u := g.ring.Used(); len(u) != 0 {
		t.Fatalf("used elements after Reset: %v", u)
	}
}

// TestActivationsAreSeparateSessions: a reset forgets the fids.
func TestActivationsAreSeparateSessions(t *testing.T) {
	_, s := shareDir(t)
	g := newGuest(t, s)
	g.mount()
	g.dev.Reset()
	ring, err := g.drv.NewQueue(64, virtiotest.RingOptions{BufSize: bufSize, EventIdx: true})
	if err != nil {
		t.Fatal(err)
	}
	g.ring = ring
	if err := g.dev.Activate(g.drv.Activation(g.dev.Features(), ring)); err != nil {
		t.Fatal(err)
	}
	g.exchange(tversion(0xffff, testSize), testSize)
	wantLerror(t, g.exchange(tgetattr(2, 1), 200), 2, 9) // EBADF: fid 1 was the old session's
}

var _ virtio.Device = (*Device)(nil)
