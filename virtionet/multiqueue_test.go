package virtionet_test

import (
	"bytes"
	"encoding/binary"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/syncbuf"
	"tinyvmm/netbackend"
	"tinyvmm/virtio/virtiotest"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

// mqDevice is a device of n pairs on socketpairs.
func mqDevice(t *testing.T, n int) (*virtionet.Device, *netbackend.SocketPairs) {
	t.Helper()
	sps, err := netbackend.NewSocketPairs(n)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := virtionet.New(virtionet.Config{Ifname: "mq0", Queues: n, IO: virtionet.IOWritev, Tuning: virtionet.DefaultTuning()}, sps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Close()
		for _, sp := range sps.Pairs {
			unix.Close(sp.Peer)
		}
	})
	return dev, sps
}

// One pair is the single-queue device of before: no MQ, no control queue,
// max_virtqueue_pairs 1. Two pairs offer MQ and CTRL_VQ, five queues (the
// control queue last) and max_virtqueue_pairs 2.
func TestMQFeaturesAndLayout(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		dev, _ := mqDevice(t, n)
		mq := dev.Features()&(virtionet.FeatMQ|virtionet.FeatCtrlVQ) != 0
		if mq != (n > 1) {
			t.Errorf("%d pairs: MQ/CTRL_VQ offered %v", n, mq)
		}
		want := 2
		if n > 1 {
			want = 2*n + 1
		}
		if got := len(dev.QueueMaxSizes()); got != want {
			t.Errorf("%d pairs: %d queues, want %d", n, got, want)
		}
		var b [2]byte
		dev.ReadConfig(8, b[:]) // max_virtqueue_pairs
		if got := binary.LittleEndian.Uint16(b[:]); int(got) != n {
			t.Errorf("%d pairs: max_virtqueue_pairs %d", n, got)
		}
		if s := dev.Stats(); len(s.Queues) != 2 || (len(s.Pairs) > 0) != (n > 1) {
			t.Errorf("%d pairs: stats have %d queues and %d pairs", n, len(s.Queues), len(s.Pairs))
		}
	}
	if _, err := virtionet.New(virtionet.Config{Ifname: "x", Queues: 2}, mustSocketPair(t)); err == nil {
		t.Error("2 queues on a single-queue backend: no error")
	}
	for _, c := range []virtionet.Config{
		{Ifname: "x", Queues: -1}, {Ifname: "x", Queues: virtionet.MaxQueuePairs + 1},
		{Ifname: "x", Queues: 2, AFPacket: "eth0"}, {Ifname: "x", Queues: 2, Pcap: "/tmp/x"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func mustSocketPair(t *testing.T) *netbackend.SocketPair {
	sp, err := netbackend.NewSocketPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close(); unix.Close(sp.Peer) })
	return sp
}

// peerFrame reads one frame from fd within a second, or returns nil.
func peerFrame(fd int) []byte {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n, _ := unix.Poll(fds, 50); n > 0 {
			buf := make([]byte, 70000)
			n, err := unix.Read(fd, buf)
			if err != nil {
				return nil
			}
			return buf[:n]
		}
	}
	return nil
}

func frameOf(seq byte) []byte {
	f := make([]byte, 60)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
	f[20] = seq
	return f
}

// Two pairs, each driven by its own goroutine: the device starts with one
// pair (the second's backend queue detached, its tx chains left alone),
// VQ_PAIRS_SET 2 starts the second worker, and then each pair's frames go
// out on its own backend queue and come in on its own rx ring, counted per
// pair and in the totals.
func TestMQTwoPairs(t *testing.T) {
	dev, sps := mqDevice(t, 2)
	m, err := guestdrv.NewMulti(dev, guestdrv.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := sps.Enabled(); !slices.Equal(got, []bool{true, false}) || dev.ActivePairs() != 1 {
		t.Fatalf("one pair asked for: queues enabled %v, %d pairs active", got, dev.ActivePairs())
	}
	hdr := 12
	// A frame on pair 1 before it is enabled stays in its ring.
	if err := m.Pairs[1].Send(frameOf(1), time.Second); err != nil {
		t.Fatal(err)
	}
	if f := peerFrame(sps.Pairs[1].Peer); f != nil {
		t.Fatal("pair 1 sent a frame before VQ_PAIRS_SET")
	}
	if ack, err := m.SetPairs(2); err != nil || ack != guestdrv.CtrlOK {
		t.Fatalf("VQ_PAIRS_SET 2: %d %v", ack, err)
	}
	if got := sps.Enabled(); !slices.Equal(got, []bool{true, true}) || dev.ActivePairs() != 2 {
		t.Fatalf("two pairs asked for: queues enabled %v, %d pairs active", got, dev.ActivePairs())
	}
	if f := peerFrame(sps.Pairs[1].Peer); f == nil || f[hdr+20] != 1 {
		t.Fatalf("pair 1's early frame: %x", f)
	}
	// Both pairs at once, from two goroutines.
	const per = 200
	errs := make(chan error, 2)
	for p := range 2 {
		go func() {
			for i := range per {
				if err := m.Pairs[p].Send(frameOf(byte(10*p+i%10)), time.Second); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for p := range 2 {
		for i := range per {
			f := peerFrame(sps.Pairs[p].Peer)
			if f == nil || f[hdr+20] != byte(10*p+i%10) {
				t.Fatalf("pair %d frame %d: %x", p, i, f)
			}
		}
		in := append(make([]byte, hdr), frameOf(byte(100+p))...)
		if _, err := unix.Write(sps.Pairs[p].Peer, in); err != nil {
			t.Fatal(err)
		}
	}
	for p := range 2 {
		got, err := m.Pairs[p].Recv(2*time.Second, func([]byte) bool { return true })
		if err != nil || !bytes.Equal(got, frameOf(byte(100+p))) {
			t.Fatalf("pair %d rx: %x %v", p, got, err)
		}
	}
	s := dev.Stats()
	if len(s.Pairs) != 2 || s.AskedPairs != 2 {
		t.Fatalf("stats: %d pairs, %d active", len(s.Pairs), s.AskedPairs)
	}
	wantTx := []uint64{per, per + 1}
	for p := range 2 {
		rx, tx := s.Pairs[p].Queues[0], s.Pairs[p].Queues[1]
		if tx.Frames != wantTx[p] || rx.Frames != 1 {
			t.Errorf("pair %d: tx %d rx %d frames, want %d and 1", p, tx.Frames, rx.Frames, wantTx[p])
		}
	}
	if s.Queues[1].Frames != 2*per+1 || s.Queues[0].Frames != 2 {
		t.Errorf("totals: tx %d rx %d", s.Queues[1].Frames, s.Queues[0].Frames)
	}
	if s.Ctrl == nil || s.Ctrl.Commands != 2 || s.Ctrl.Errors != 0 {
		t.Errorf("control stats %+v", s.Ctrl)
	}
	if text := s.String(); !strings.Contains(text, "pair 1: rx 1 frames") || !strings.Contains(text, "2 of 2 queue pairs") {
		t.Errorf("--stats text without the pairs:\n%s", text)
	}
	// Back to one pair: its queue detached, its worker gone.
	if ack, err := m.SetPairs(1); err != nil || ack != guestdrv.CtrlOK {
		t.Fatalf("VQ_PAIRS_SET 1: %d %v", ack, err)
	}
	if got := sps.Enabled(); !slices.Equal(got, []bool{true, false}) || dev.ActivePairs() != 1 {
		t.Fatalf("back to one pair: queues enabled %v, %d active", got, dev.ActivePairs())
	}
	if err := m.Pairs[1].Send(frameOf(9), time.Second); err != nil {
		t.Fatal(err)
	}
	if f := peerFrame(sps.Pairs[1].Peer); f != nil {
		t.Fatal("pair 1 sent a frame after going back to one pair")
	}
	if err := m.Pairs[0].Send(frameOf(7), time.Second); err != nil {
		t.Fatal(err)
	}
	if f := peerFrame(sps.Pairs[0].Peer); f == nil || f[hdr+20] != 7 {
		t.Fatalf("pair 0 after going back to one pair: %x", f)
	}
	// A reset with two pairs in use leaves only the first queue attached.
	if ack, err := m.SetPairs(2); err != nil || ack != guestdrv.CtrlOK {
		t.Fatalf("VQ_PAIRS_SET 2 again: %d %v", ack, err)
	}
	dev.Reset()
	if got := sps.Enabled(); !slices.Equal(got, []bool{true, false}) || dev.ActivePairs() != 0 {
		t.Fatalf("after reset: queues enabled %v, %d active", got, dev.ActivePairs())
	}
}

// Every malformed or unknown command is answered VIRTIO_NET_ERR, changes
// nothing, and the queue goes on answering.
func TestCtrlBadCommands(t *testing.T) {
	dev, _ := mqDevice(t, 2)
	m, err := guestdrv.NewMulti(dev, guestdrv.Options{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		name       string
		class, cmd byte
		data       []byte
	}{
		{"pairs 0", 4, 0, []byte{0, 0}},
		{"pairs 3 of 2", 4, 0, []byte{3, 0}},
		{"pairs 0x8000", 4, 0, []byte{0, 0x80}},
		{"pairs 0xffff", 4, 0, []byte{0xff, 0xff}},
		{"no data", 4, 0, nil},
		{"one byte of data", 4, 0, []byte{1}},
		{"three bytes of data", 4, 0, []byte{1, 0, 0}},
		{"MQ command 1 (RSS)", 4, 1, []byte{1, 0}},
		{"class RX (promisc)", 0, 0, []byte{1}},
		{"class MAC", 1, 1, make([]byte, 6)},
		{"class 255", 255, 255, make([]byte, 40)},
	} {
		ack, err := m.Command(c.class, c.cmd, c.data)
		if err != nil || ack != guestdrv.CtrlErr {
			t.Errorf("%s: answer %d, %v; want VIRTIO_NET_ERR", c.name, ack, err)
		}
		if n := dev.ActivePairs(); n != 2 {
			t.Fatalf("%s: %d pairs active, want 2", c.name, n)
		}
	}
	// A chain with no writable byte is given back unanswered, and one of
	// a single readable byte is an error; the queue still works after.
	if _, err := m.Ctrl.AddChain([][]byte{{4, 0}, {1, 0}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ctrl.AddChain([][]byte{{4}}, []uint32{1}); err != nil {
		t.Fatal(err)
	}
	m.Ctrl.ForceKick()
	var lens []uint32
	deadline := time.Now().Add(3 * time.Second)
	for len(lens) < 2 && time.Now().Before(deadline) {
		for _, u := range m.Ctrl.Used() {
			lens = append(lens, u.Len)
		}
		time.Sleep(time.Millisecond)
	}
	if !slices.Equal(lens, []uint32{0, 1}) {
		t.Fatalf("used lengths %v, want [0 1]", lens)
	}
	if ack, err := m.SetPairs(1); err != nil || ack != guestdrv.CtrlOK || dev.ActivePairs() != 1 {
		t.Fatalf("VQ_PAIRS_SET 1 after the bad ones: %d %v, %d active", ack, err, dev.ActivePairs())
	}
	s := dev.Stats().Ctrl
	if s.Errors != 12 || s.Unanswerable != 1 {
		t.Errorf("control stats %+v: want 12 errors, 1 unanswerable", s)
	}
	if f := m.Drv.Failures(); len(f) > 0 {
		t.Errorf("bad commands broke the device: %v", f)
	}
}

// With several pairs, each trace line names its pair's queue, and the
// workers' lines do not interleave.
func TestMQTraceNamesPairs(t *testing.T) {
	sps, err := netbackend.NewSocketPairs(2)
	if err != nil {
		t.Fatal(err)
	}
	var trace syncbuf.Buffer
	dev, err := virtionet.New(virtionet.Config{Ifname: "mq0", Queues: 2, IO: virtionet.IOWritev, Tuning: virtionet.DefaultTuning(), Trace: &trace}, sps)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		dev.Close()
		for _, sp := range sps.Pairs {
			unix.Close(sp.Peer)
		}
	}()
	m, err := guestdrv.NewMulti(dev, guestdrv.Options{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for p := range 2 {
		if err := m.Pairs[p].Send(frameOf(byte(p)), time.Second); err != nil {
			t.Fatal(err)
		}
		if f := peerFrame(sps.Pairs[p].Peer); f == nil {
			t.Fatalf("pair %d sent nothing", p)
		}
	}
	m.Close()
	for _, want := range []string{" tx0 pop", " tx1 pop"} {
		if !strings.Contains(trace.String(), want) {
			t.Errorf("no %q in the trace:\n%s", want, trace.String())
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(trace.String()), "\n") {
		if f := strings.Fields(line); len(f) < 3 || !strings.HasPrefix(f[0], "+") || !regexp.MustCompile(`^(rx|tx)[01]$`).MatchString(f[1]) {
			t.Fatalf("trace line %q", line)
		}
	}
}

// A guest that acks MQ but never set up the second pair's queues gets
// VIRTIO_NET_ERR for VQ_PAIRS_SET 2, and that pair's backend queue stays
// detached. After a reset only the first queue stays attached.
func TestMQPairNotSetUp(t *testing.T) {
	dev, sps := mqDevice(t, 2)
	drv := virtiotest.New(4 << 20)
	defer drv.Close()
	var rings []*virtiotest.Ring
	for range 5 {
		r, err := drv.NewQueue(16, virtiotest.RingOptions{EventIdx: true})
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, r)
	}
	a := drv.Activation(dev.Features(), rings...)
	a.Queues[2], a.Queues[3] = nil, nil // pair 1 never enabled
	if err := dev.Activate(a); err != nil {
		t.Fatal(err)
	}
	m := &guestdrv.Multi{Drv: drv, Dev: dev, Ctrl: rings[4]}
	if ack, err := m.SetPairs(2); err != nil || ack != guestdrv.CtrlErr {
		t.Fatalf("VQ_PAIRS_SET 2 with pair 1 not set up: %d %v", ack, err)
	}
	if got := sps.Enabled(); !slices.Equal(got, []bool{true, false}) || dev.ActivePairs() != 1 {
		t.Fatalf("queues enabled %v, %d active", got, dev.ActivePairs())
	}
	dev.Reset()
	if got := sps.Enabled(); !slices.Equal(got, []bool{true, false}) || dev.ActivePairs() != 0 {
		t.Fatalf("after reset: queues enabled %v, %d active", got, dev.ActivePairs())
	}
}
