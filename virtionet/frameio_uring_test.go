package virtionet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/uring"
	"tinyvmm/virtio/virtiotest"
)

// skipUnlessUring skips where this kernel gives no io_uring.
func skipUnlessUring(t *testing.T) {
	t.Helper()
	r, err := uring.New(4)
	if err != nil {
		t.Skipf("io_uring unavailable here: %v", err)
	}
	r.Close()
}

// uringWorks says whether this kernel gives an io_uring.
func uringWorks() bool {
	r, err := uring.New(4)
	if err == nil {
		r.Close()
	}
	return err == nil
}

// A write the backend refuses is one counted drop; the group's other
// frames still go.
func TestIOUringWriteErrorIsOneDrop(t *testing.T) {
	skipUnlessUring(t)
	feat := uint64(FeatVersion1 | FeatMAC | FeatEventIdx)
	r := newRig(t, rigOptions{io: IOUring, features: feat})
	// A SOCK_SEQPACKET message over the send buffer fails with EMSGSIZE.
	unix.SetsockoptInt(r.sp.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	big := r.txFrame(1, 16000)
	for _, out := range [][][]byte{{r.txFrame(0, 60)}, {big[:4000], big[4000:8000], big[8000:12000], big[12000:]}, {r.txFrame(2, 60)}} {
		if _, err := r.tx.AddChain(out, nil); err != nil {
			t.Fatal(err)
		}
	}
	r.activate()
	r.waitUsed(r.tx, 3, nil)
	if a, b := r.peerRead(), r.peerRead(); string(a) != string(r.txFrame(0, 60)) || string(b) != string(r.txFrame(2, 60)) {
		t.Errorf("the two good frames did not arrive in order")
	}
	s := r.stats(txQueue)
	if s.Frames != 2 || s.Drops[DropTxWriteError.String()] != 1 {
		t.Errorf("%d frames, drops %v; want 2 and one write error", s.Frames, s.Drops)
	}
	if r.dev.IO() != IOUring {
		t.Error("one refused frame made the device give up io_uring")
	}
}

// Where io_uring cannot be set up, IO=uring says so once and the device
// writes one frame per writev.
func TestIOUringUnavailableFallsBack(t *testing.T) {
	newRing = func(uint32) (*uring.Ring, error) { return nil, errors.New("io_uring_setup: operation not permitted") }
	defer func() { newRing = uring.New }()
	r := newRig(t, rigOptions{io: IOUring})
	if io := r.dev.IO(); io != IOWritev {
		t.Errorf("device IO %q, want writev", io)
	}
	if log := r.log.String(); strings.Count(log, "\n") != 1 || !strings.Contains(log, "io_uring unavailable") {
		t.Errorf("log %q, want one line saying io_uring is unavailable", log)
	}
	r.txBurst(4, 60)
	r.activate()
	r.waitUsed(r.tx, 4, nil)
	if s := r.stats(txQueue); s.Frames != 4 || s.Syscalls != 4 {
		t.Errorf("%d frames in %d system calls, want 4 in 4", s.Frames, s.Syscalls)
	}
}

// A ring that fails under the worker (io_uring_enter on an fd that is no
// longer a ring) makes the device go back to writev for good; no frame
// is lost or sent twice.
func TestIOUringFailureFallsBackToWritev(t *testing.T) {
	skipUnlessUring(t)
	r := newRig(t, rigOptions{io: IOUring})
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	if err := unix.Dup2(efd, r.dev.pairs[0].ring.Fd()); err != nil {
		t.Fatal(err)
	}
	r.txBurst(12, 60)
	r.activate()
	for i := 0; i < 12; i++ {
		if got := r.peerRead(); string(got) != string(r.txFrame(i, 60)) {
			t.Fatalf("frame %d out of order or changed", i)
		}
	}
	r.waitUsed(r.tx, 12, nil)
	if r.dev.IO() != IOWritev || !strings.Contains(r.log.String(), "io_uring failed") {
		t.Errorf("device IO %q, log %q; want writev after a notice", r.dev.IO(), r.log.String())
	}
	var one [1]byte
	if n, _, _ := unix.Recvfrom(r.sp.Peer, one[:], unix.MSG_DONTWAIT); n > 0 {
		t.Error("a frame was sent twice")
	}
}

// Rx with IO=uring reads in waves, each one io_uring_enter twice as deep
// as the one before, starting from the last batch's depth, until a read
// finds the backend empty. The first read of a device's life is as after
// a lone frame, two readv (uringIO); 20 waiting frames then take waves of
// 4, 8 and 16 reads, and make one batch (one publish, one interrupt).
// Without GUEST_TSO every 2048-byte buffer holds a whole frame.
func TestRxIOUringWaves(t *testing.T) {
	skipUnlessUring(t)
	r := newRig(t, rigOptions{io: IOUring, features: FeatVersion1 | FeatMAC | FeatMrgRxBuf})
	r.rx.AddRxBuffers(64, 2048)
	for i := 0; i < 20; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	r.activate()
	var lens []uint32
	r.waitUsed(r.rx, 20, func(u virtiotest.UsedElem) { lens = append(lens, u.Len) })
	for i, l := range lens {
		if int(l) != r.hdrLen()+64 {
			t.Fatalf("frame %d: used length %d", i, l)
		}
	}
	if s := r.stats(rxQueue); s.Syscalls != 5 || s.Batches["16-31"] != 1 || len(s.Batches) != 1 {
		t.Errorf("rx: %d system calls, batches %v; want 5 and one batch of 16-31\n%s", s.Syscalls, s.Batches, r.trace.String())
	}
	waitFor(t, "the batch's interrupt", func() bool { return r.rx.Irq.Count() >= 1 }) // it follows the publish
	if n := r.rx.Irq.Count(); n != 1 {
		t.Errorf("%d interrupts, want 1", n)
	}
}

// ptyBackend is a pty master as a backend: pollable, takes writev, and
// refuses RWF_NOWAIT requests (-EOPNOTSUPP), as a tap does on kernels
// where it lacks FMODE_NOWAIT.
type ptyBackend struct{ master, peer int }

func (p *ptyBackend) Name() string             { return "pty" }
func (p *ptyBackend) Fd() int                  { return p.master }
func (p *ptyBackend) Offloads() uint           { return 0 }
func (p *ptyBackend) SetVnetHdrSize(int) error { return nil }
func (p *ptyBackend) SetOffload(uint) error    { return nil }
func (p *ptyBackend) Close() error             { unix.Close(p.peer); return unix.Close(p.master) }

func openPtyBackend(t *testing.T) *ptyBackend {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		t.Skipf("unlockpt: %v", err)
	}
	peer, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if e != 0 {
		unix.Close(m)
		t.Skipf("pty peer: %v", e)
	}
	// Raw mode, so that the peer's line discipline takes the frames as
	// they are.
	tio, err := unix.IoctlGetTermios(int(peer), unix.TCGETS)
	if err == nil {
		tio.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG | unix.IEXTEN
		tio.Iflag &^= unix.ICRNL | unix.IXON | unix.INLCR | unix.ISTRIP
		tio.Oflag &^= unix.OPOST
		unix.IoctlSetTermios(int(peer), unix.TCSETS, tio)
	}
	return &ptyBackend{master: m, peer: int(peer)}
}

// skipProbe lets a backend that refuses RWF_NOWAIT past the open-time
// probe, so that the fallback in the middle of the datapath is tested.
func skipProbe(t *testing.T) {
	old := probeRing
	probeRing = func(*uring.Ring, int) error { return nil }
	t.Cleanup(func() { probeRing = old })
}

// The probe at open finds a backend that refuses non-waiting requests:
// one notice, and writev from the start.
func TestIOUringProbeFindsUnsupportedBackend(t *testing.T) {
	skipUnlessUring(t)
	pb := openPtyBackend(t)
	r := newRig(t, rigOptions{io: IOUring, features: FeatVersion1 | FeatMAC, backend: pb})
	if r.dev.IO() != IOWritev || strings.Count(r.log.String(), "RWF_NOWAIT") != 1 {
		t.Fatalf("device IO %q, log %q; want writev after one notice", r.dev.IO(), r.log.String())
	}
}

// A backend that refuses non-waiting requests makes the device give up
// io_uring with a notice; every frame still goes out, once, by writev.
func TestIOUringUnsupportedBackendFallsBack(t *testing.T) {
	skipUnlessUring(t)
	skipProbe(t)
	pb := openPtyBackend(t)
	feat := uint64(FeatVersion1 | FeatMAC)
	r := newRig(t, rigOptions{io: IOUring, features: feat, backend: pb})
	if r.dev.IO() != IOUring {
		t.Fatalf("device IO %q before any frame, want uring", r.dev.IO())
	}
	r.txBurst(6, 20)
	r.activate()
	r.waitUsed(r.tx, 6, nil)
	if s := r.stats(txQueue); s.Frames != 6 || s.Drops != nil {
		t.Errorf("%d frames, drops %v; want 6 sent", s.Frames, s.Drops)
	}
	if r.dev.IO() != IOWritev || !strings.Contains(r.log.String(), "RWF_NOWAIT") {
		t.Errorf("device IO %q, log %q; want writev after a notice", r.dev.IO(), r.log.String())
	}
	want := 0
	for i := 0; i < 6; i++ {
		want += len(r.txFrame(i, 20))
	}
	got := make([]byte, 2*want)
	n := 0
	for deadline := time.Now().Add(2 * time.Second); n < want && time.Now().Before(deadline); {
		k, err := unix.Read(pb.peer, got[n:])
		if k > 0 {
			n += k
		} else if err != nil && err != unix.EAGAIN {
			t.Fatal(err)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if k, _ := unix.Read(pb.peer, got[n:]); k > 0 {
		n += k
	}
	if n != want {
		t.Errorf("peer read %d bytes, want %d (each frame once)", n, want)
	}
}

// The same on rx. A lone frame is read by readv (uringIO), so the ring
// is not asked for it; after a burst it is, refuses, and the read goes
// back: the frame is still there for readv.
func TestIOUringUnsupportedBackendFallsBackRx(t *testing.T) {
	skipUnlessUring(t)
	skipProbe(t)
	pb := openPtyBackend(t)
	r := newRig(t, rigOptions{io: IOUring, features: FeatVersion1 | FeatMAC, backend: pb})
	r.rx.AddRxBuffers(8, 2048)
	r.activate()
	frame := r.txFrame(0, 40)
	if _, err := unix.Write(pb.peer, frame); err != nil {
		t.Fatal(err)
	}
	var lens []uint32
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { lens = append(lens, u.Len) })
	if lens[0] != uint32(len(frame)) {
		t.Errorf("used length %d, want %d", lens[0], len(frame))
	}

	ring, err := uring.New(8)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	pb2 := openPtyBackend(t)
	defer pb2.Close()
	u := newUringIO(ring)
	u.lone = false // as after a burst
	if _, err := unix.Write(pb2.peer, frame); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 128)
	got := []int{0}
	_, _, err = u.recv(pb2.master, [][]unix.Iovec{{iovec(buf)}}, got)
	if f, ok := err.(*ioFailure); !ok || f.err != errRingUnsupported {
		t.Fatalf("the ring's read: %v, want the ring refused", err)
	}
	var readv vectorIO
	if n, _, err := readv.recv(pb2.master, [][]unix.Iovec{{iovec(buf)}}, got); n != 1 || err != nil || got[0] != len(frame) {
		t.Errorf("readv after the refusal: %d frames of %d bytes, %v; want the frame", n, got[0], err)
	}
}

// TestUringLoneFramesGoByPlainCalls: a send of one frame is one writev, a
// send of more one io_uring_enter; after a lone frame a recv starts with
// readv and turns to the ring only when two frames in a row wait. Every
// frame arrives, in order.
func TestUringLoneFramesGoByPlainCalls(t *testing.T) {
	skipUnlessUring(t)
	ring, err := uring.New(64)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	u := newUringIO(ring)
	frame := func(i int) []byte { return []byte{byte(i), 1, 2, 3} }

	res := make([]int, 3)
	plain := u.plainCalls
	if _, err := u.send(fds[0], [][]unix.Iovec{{iovec(frame(0))}}, res[:1]); err != nil || res[0] != 4 {
		t.Fatalf("send of one: %v, %d", err, res[0])
	}
	if u.plainCalls != plain+1 {
		t.Errorf("a send of one frame made %d plain calls, want 1", u.plainCalls-plain)
	}
	plain = u.plainCalls
	three := [][]unix.Iovec{{iovec(frame(1))}, {iovec(frame(2))}, {iovec(frame(3))}}
	if calls, err := u.send(fds[0], three, res); err != nil || calls != 1 || u.plainCalls != plain {
		t.Errorf("a send of three: %d calls, %d plain, %v; want one io_uring_enter", calls, u.plainCalls-plain, err)
	}
	buf := make([]byte, 16)
	for i := 0; i < 4; i++ {
		if n, err := unix.Read(fds[1], buf); err != nil || string(buf[:n]) != string(frame(i)) {
			t.Fatalf("frame %d: %q, %v", i, buf[:n], err)
		}
	}

	bufs := make([][]byte, 8)
	slots := make([][]unix.Iovec, 8)
	for i := range slots {
		bufs[i] = make([]byte, 16)
		slots[i] = []unix.Iovec{iovec(bufs[i])}
	}
	got := make([]int, 8)
	recv := func(sent int) (plainCalls uint64) {
		t.Helper()
		for i := 0; i < sent; i++ {
			if _, err := unix.Write(fds[1], frame(10+i)); err != nil {
				t.Fatal(err)
			}
		}
		plain := u.plainCalls
		n, _, err := u.recv(fds[0], slots, got)
		if n != sent || !errors.Is(err, unix.EAGAIN) {
			t.Fatalf("recv of %d: %d, %v", sent, n, err)
		}
		for i := 0; i < sent; i++ {
			if string(bufs[i][:got[i]]) != string(frame(10+i)) {
				t.Fatalf("recv of %d: slot %d holds %q", sent, i, bufs[i][:got[i]])
			}
		}
		return u.plainCalls - plain
	}
	if p := recv(1); p != 2 {
		t.Errorf("a lone frame took %d plain calls, want 2 (the frame, and the backend empty)", p)
	}
	if p := recv(5); p != 2 {
		t.Errorf("five frames after a lone one took %d plain calls, want 2, then the ring", p)
	}
	if p := recv(1); p != 0 {
		t.Errorf("a frame after five took %d plain calls, want the ring's", p)
	}
	if p := recv(1); p != 2 {
		t.Errorf("a second lone frame took %d plain calls, want 2", p)
	}
}
