package virtionet

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/netbackend"
	"tinyvmm/virtio/virtiotest"
)

// mqTestDevice is a two-pair device on socketpairs, moving frames by io.
func mqTestDevice(t *testing.T, io IOMode) *Device {
	t.Helper()
	sps, err := netbackend.NewSocketPairs(2)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Ifname: "mq0", Queues: 2, IO: io, Tuning: DefaultTuning()}, sps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		for _, sp := range sps.Pairs {
			unix.Close(sp.Peer)
		}
	})
	return d
}

// With io=uring each pair has an io_uring ring of its own.
func TestMQRingPerPair(t *testing.T) {
	skipUnlessUring(t)
	d := mqTestDevice(t, IOUring)
	r0, r1 := d.pairs[0].ring, d.pairs[1].ring
	if r0 == nil || r1 == nil || r0 == r1 {
		t.Fatalf("rings %p %p: want one each", r0, r1)
	}
	if io := d.Stats().IO; io != IOUring {
		t.Errorf("IO %q", io)
	}
}

// A driver that acks CTRL_VQ but not MQ has the control queue at index 2
// (virtio 1.2, 5.1.2) and one pair; VQ_PAIRS_SET is then an error, and
// other queues are not touched.
func TestCtrlWithoutMQ(t *testing.T) {
	d := mqTestDevice(t, "")
	drv := virtiotest.New(1 << 20)
	defer drv.Close()
	var rings []*virtiotest.Ring
	for range 3 {
		r, err := drv.NewQueue(8, virtiotest.RingOptions{BufSize: 64})
		if err != nil {
			t.Fatal(err)
		}
		rings = append(rings, r)
	}
	if err := d.Activate(drv.Activation(d.Features()&^FeatMQ, rings...)); err != nil {
		t.Fatal(err)
	}
	ctrl := rings[2]
	for _, want := range []struct {
		pairs uint16
		ack   byte
	}{{1, ctrlErr}, {2, ctrlErr}} {
		if _, err := ctrl.AddChain([][]byte{{ctrlClassMQ, ctrlMQPairsSet}, binary.LittleEndian.AppendUint16(nil, want.pairs)}, []uint32{1}); err != nil {
			t.Fatal(err)
		}
		ctrl.ForceKick()
		deadline := time.Now().Add(3 * time.Second)
		for {
			if u := ctrl.Used(); len(u) == 1 {
				if got := ctrl.ReadBuf(u[0], nil); len(got) != 1 || got[0] != want.ack {
					t.Fatalf("VQ_PAIRS_SET %d without MQ: answer %v", want.pairs, got)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no answer")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if n := d.ActivePairs(); n != 1 {
		t.Errorf("%d pairs active, want 1", n)
	}
}
