package virtionet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/syncbuf"
	"tinyvmm/netbackend"
	"tinyvmm/ratelimit"
	"tinyvmm/virtio/virtiotest"
)

// rig is a device on a socketpair, driven by the Go driver.
type rig struct {
	t      *testing.T
	drv    *virtiotest.Driver
	rx, tx *virtiotest.Ring
	dev    *Device
	sp     *netbackend.SocketPair
	trace  *traceBuffer
	log    *syncbuf.Buffer // the device's notices
	feat   uint64
}

func (r *rig) logf(format string, args ...any) { fmt.Fprintf(r.log, format+"\n", args...) }

type rigOptions struct {
	features  uint64 // acked; 0 means all offered
	tuning    Tuning
	rxBufSize uint32
	txBufSize uint32
	size      uint16
	indirect  int
	backend   Backend // instead of the socketpair (which is still made)
	io        IOMode  // one of rigIOs; "" is sendmmsg
	mem       int     // guest memory in bytes; 0 means 8 MiB
	pcap      string  // Config.Pcap
	rxLimit   ratelimit.Limit
	txLimit   ratelimit.Limit
	vcpus     func() []int // Config.VCPUThreads
}

// rigIOs are the frame-I/O mechanisms a rig can run (rigOptions.io):
// one readv or writev per frame (as on a tap), recvmmsg and sendmmsg (the
// socketpair's own way), and io_uring over one-frame-per-call.
var rigIOs = []IOMode{IOWritev, IOSendmmsg, IOUring}

// skipUnlessIO skips where this kernel cannot run the mechanism.
func skipUnlessIO(t *testing.T, io IOMode) {
	t.Helper()
	if io == IOUring {
		skipUnlessUring(t)
	}
}

// traceBuffer collects the device's trace for the test. onLine, when
// set before the worker starts, sees each line first, on the worker's
// thread: a test can act at an exact point of a run.
type traceBuffer struct {
	syncbuf.Buffer
	onLine func(line []byte)
}

func (s *traceBuffer) Write(p []byte) (int, error) {
	if s.onLine != nil {
		s.onLine(p)
	}
	return s.Buffer.Write(p)
}

// count returns how many trace lines contain all of words.
func (s *traceBuffer) count(words ...string) int {
	n := 0
	for _, line := range strings.Split(s.String(), "\n") {
		all := line != ""
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			n++
		}
	}
	return n
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	if o.size == 0 {
		o.size = 256
	}
	if o.rxBufSize == 0 {
		o.rxBufSize = 2048
	}
	if o.txBufSize == 0 {
		o.txBufSize = 4096
	}
	if o.tuning == (Tuning{}) {
		o.tuning = DefaultTuning()
	}
	sp, err := netbackend.NewSocketPair()
	if err != nil {
		t.Fatal(err)
	}
	sp.SingleFrame = o.io != "" && o.io != IOSendmmsg
	cfgIO := IOWritev // the socketpair's own sendmmsg unless SingleFrame
	if o.io == IOUring {
		cfgIO = IOUring
	}
	r := &rig{t: t, sp: sp, trace: &traceBuffer{}, log: &syncbuf.Buffer{}}
	var b Backend = sp
	if o.backend != nil {
		b = o.backend
	}
	r.dev, err = New(Config{Ifname: "test0", Tuning: o.tuning, Trace: r.trace, IO: cfgIO, Log: r.logf,
		Pcap: o.pcap, RxLimit: o.rxLimit, TxLimit: o.txLimit, VCPUThreads: o.vcpus}, b)
	if err != nil {
		t.Fatal(err)
	}
	r.feat = o.features
	if r.feat == 0 {
		r.feat = r.dev.Features()
	}
	eventIdx := r.feat&FeatEventIdx != 0
	if o.mem == 0 {
		o.mem = 8 << 20
	}
	r.drv = virtiotest.New(o.mem)
	if r.rx, err = r.drv.NewQueue(o.size, virtiotest.RingOptions{BufSize: o.rxBufSize, EventIdx: eventIdx}); err != nil {
		t.Fatal(err)
	}
	if r.tx, err = r.drv.NewQueue(o.size, virtiotest.RingOptions{BufSize: o.txBufSize, EventIdx: eventIdx, Indirect: o.indirect}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.dev.Close()
		unix.Close(sp.Peer)
		r.drv.Close()
	})
	return r
}

func (r *rig) activate() {
	r.t.Helper()
	if err := r.dev.Activate(r.drv.Activation(r.feat, r.rx, r.tx)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) hdrLen() int { return vnetHdrLen(r.feat) }

// txFrame is a vnet header followed by a frame whose bytes count from seq.
func (r *rig) txFrame(seq, n int) []byte {
	b := make([]byte, r.hdrLen()+n)
	for i := range b[r.hdrLen():] {
		b[r.hdrLen()+i] = byte(seq + i)
	}
	return b
}

// waitUsed collects used elements of ring until it has n, or fails.
func (r *rig) waitUsed(ring *virtiotest.Ring, n int, read func(virtiotest.UsedElem)) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	got := 0
	for got < n {
		for _, u := range ring.Used() {
			if read != nil {
				read(u)
			}
			got++
		}
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("got %d used elements, want %d\ntrace:\n%s", got, n, tail(r.trace.String()))
		}
		time.Sleep(100 * time.Microsecond)
	}
	if got != n {
		r.t.Fatalf("got %d used elements, want %d", got, n)
	}
}

// peerRead reads one frame the device sent, within a second.
func (r *rig) peerRead() []byte {
	r.t.Helper()
	buf := make([]byte, 70000)
	fds := []unix.PollFd{{Fd: int32(r.sp.Peer), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 1000)
	for errors.Is(err, unix.EINTR) { // the Go runtime's preemption signal
		n, err = unix.Poll(fds, 1000)
	}
	if err != nil || n == 0 {
		r.t.Fatalf("no frame from the device (poll: %v)", err)
	}
	n, err = unix.Read(r.sp.Peer, buf)
	if err != nil {
		r.t.Fatalf("peer read: %v", err)
	}
	return buf[:n]
}

// peerWrite sends one frame (vnet header included) to the device.
func (r *rig) peerWrite(frame []byte) {
	r.t.Helper()
	if _, err := unix.Write(r.sp.Peer, frame); err != nil {
		r.t.Fatalf("peer write: %v", err)
	}
}

// roundTrip is a ping's turn, or a request's and its answer: the peer
// sends a 64-byte frame, the guest takes it and sends one back, and the
// peer reads that.
func (r *rig) roundTrip(seq int) {
	r.t.Helper()
	r.peerWrite(r.txFrame(seq, 64))
	r.waitUsed(r.rx, 1, nil)
	if _, err := r.tx.AddChain([][]byte{r.txFrame(seq, 64)}, nil); err != nil {
		r.t.Fatal(err)
	}
	r.tx.Kick()
	r.peerRead()
	r.waitUsed(r.tx, 1, nil)
}

func (r *rig) stats(q int) QueueStats { return r.dev.Stats().Queues[q] }

func numBuffers(frame []byte) int { return int(binary.LittleEndian.Uint16(frame[10:])) }

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}
