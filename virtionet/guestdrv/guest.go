// Package guestdrv plays a network guest over a virtionet.Device with the
// Go virtio driver (virtio/virtiotest): it sends and receives frames,
// keeps the rx ring full and answers ARP, ping and UDP echo. Tests and the
// device benchmark use it; one goroutine drives a Guest at a time.
package guestdrv

import (
	"errors"
	"fmt"
	"net"
	"time"

	"tinyvmm/internal/ethframe"
	"tinyvmm/virtio/virtiotest"
	"tinyvmm/virtionet"
)

// Options shape the guest.
type Options struct {
	// Features to ack, within what the device offers; 0 means all.
	Features uint64
	// QueueSize of both rings; 0 means 256.
	QueueSize uint16
	// RxBufSize is the size of each rx buffer; 0 means 2048.
	RxBufSize uint32
	// IP of the guest, for answering ARP, ping and UDP echo.
	IP net.IP
}

// Guest is the driver side of one device.
type Guest struct {
	Drv      *virtiotest.Driver
	Rx, Tx   *virtiotest.Ring
	Dev      *virtionet.Device
	MAC      net.HardwareAddr
	IP       net.IP
	Features uint64

	hdrLen    int
	mergeable bool
	rxBufSize uint32
	frame     []byte // rx reassembly
	out       []byte // tx staging
	pending   []virtiotest.UsedElem
	replies   [][]byte // answers waiting for tx ring space, like a qdisc
	// Received counts frames delivered to the guest, Replies the ARP,
	// ping and echo answers it sent.
	Received, Replies uint64
}

// New lays out the rings, fills the rx ring and activates dev.
func New(dev *virtionet.Device, o Options) (*Guest, error) {
	o = o.withDefaults()
	feat := o.features(dev)
	n := uint64(o.QueueSize)
	drv := virtiotest.New(int(n*uint64(o.RxBufSize) + n*4096 + 1<<20))
	g, err := newGuest(dev, drv, o, feat)
	if err != nil {
		return nil, err
	}
	if err := dev.Activate(g.Drv.Activation(feat, g.Rx, g.Tx)); err != nil {
		g.Drv.Close()
		return nil, err
	}
	return g, nil
}

func (o Options) withDefaults() Options {
	if o.QueueSize == 0 {
		o.QueueSize = 256
	}
	if o.RxBufSize == 0 {
		o.RxBufSize = 2048
	}
	return o
}

// features are the features the guest acks.
func (o Options) features(dev *virtionet.Device) uint64 {
	feat := dev.Features()
	if o.Features != 0 {
		feat &= o.Features
	}
	return feat
}

// newGuest lays out one pair's rings in drv's memory and fills the rx ring.
func newGuest(dev *virtionet.Device, drv *virtiotest.Driver, o Options, feat uint64) (*Guest, error) {
	g := &Guest{
		Drv: drv, Dev: dev, MAC: dev.MAC(), IP: o.IP.To4(), Features: feat,
		hdrLen:    hdrLen(feat),
		mergeable: feat&virtionet.FeatMrgRxBuf != 0,
		rxBufSize: o.RxBufSize,
		frame:     make([]byte, 0, 70000),
		out:       make([]byte, 0, 70000),
	}
	eventIdx := feat&virtionet.FeatEventIdx != 0
	var err error
	if g.Rx, err = g.Drv.NewQueue(o.QueueSize, virtiotest.RingOptions{BufSize: o.RxBufSize, EventIdx: eventIdx}); err != nil {
		return nil, err
	}
	if g.Tx, err = g.Drv.NewQueue(o.QueueSize, virtiotest.RingOptions{BufSize: 4096, EventIdx: eventIdx}); err != nil {
		return nil, err
	}
	if !g.mergeable && feat&(virtionet.FeatGuestTSO4|virtionet.FeatGuestTSO6) != 0 {
		return nil, errors.New("guestdrv: GUEST_TSO without MRG_RXBUF needs 64 KiB rx buffers, which this driver does not post")
	}
	// One interrupt for both queues, like a single MSI-X vector, so that
	// WaitTxOrRx can sleep on either.
	g.Tx.Irq = g.Rx.Irq
	g.fillRx()
	return g, nil
}

func hdrLen(feat uint64) int {
	if feat&(virtionet.FeatVersion1|virtionet.FeatMrgRxBuf) != 0 {
		return 12
	}
	return 10
}

// Close resets the device and frees the rings' eventfds.
func (g *Guest) Close() {
	g.Dev.Reset()
	g.Drv.Close()
}

// fillRx posts every free descriptor as an rx buffer.
func (g *Guest) fillRx() {
	if n := g.Rx.Free(); n > 0 {
		g.Rx.AddRxBuffers(n, g.rxBufSize)
	}
}

// Queue posts one frame (a zero vnet header is put in front) without
// kicking; it returns false when the tx ring is full even after reclaiming.
func (g *Guest) Queue(frame []byte) bool {
	if !g.flushReplies() {
		return false
	}
	if g.Tx.Free() == 0 && len(g.Tx.Used()) == 0 {
		return false
	}
	g.out = append(g.out[:g.hdrLen], frame...)
	clear(g.out[:g.hdrLen])
	var bufs [1][]byte
	bufs[0] = g.out
	_, err := g.Tx.AddChain(bufs[:], nil)
	return err == nil
}

// Kick notifies the device of queued tx frames if it asked for that.
func (g *Guest) Kick() { g.Tx.Kick() }

// Send queues one frame and kicks, waiting up to timeout for ring space.
func (g *Guest) Send(frame []byte, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !g.Queue(frame) {
		if time.Now().After(deadline) {
			return fmt.Errorf("guestdrv: tx ring full for %v", timeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
	g.Kick()
	return nil
}

// Poll hands every received frame (without vnet header) to handle, answers
// ARP, ping and UDP echo for the guest's IP (queued on tx, kicked), refills
// the rx ring and returns the number of frames received.
func (g *Guest) Poll(handle func(frame []byte)) int {
	used := g.Rx.Used()
	if len(used) == 0 {
		return 0
	}
	g.pending = append(g.pending[:0], used...)
	n, replies := 0, 0
	for len(g.pending) > 0 {
		var frame []byte
		var k int
		if g.mergeable {
			var err error
			if frame, k, err = g.Rx.ReadMergeable(g.pending, g.frame[:0]); err != nil {
				break
			}
		} else {
			frame, k = g.Rx.ReadBuf(g.pending[0], g.frame[:0]), 1
		}
		g.pending = g.pending[k:]
		if len(frame) < g.hdrLen {
			continue
		}
		frame = frame[g.hdrLen:]
		n++
		if g.IP != nil {
			if reply, ok := ethframe.AppendReply(make([]byte, g.hdrLen, 128), frame, g.MAC, g.IP); ok && len(g.replies) < maxReplies {
				g.replies = append(g.replies, reply)
				replies++
			}
		}
		if handle != nil {
			handle(frame)
		}
	}
	g.Received += uint64(n)
	g.Replies += uint64(replies)
	g.fillRx()
	g.Rx.Kick()
	if replies > 0 {
		g.flushReplies()
		g.Tx.Kick()
	}
	return n
}

// maxReplies bounds the answers waiting for tx space; more are dropped.
const maxReplies = 64

// flushReplies posts waiting answers ahead of other tx frames and reports
// whether all of them went out.
func (g *Guest) flushReplies() bool {
	for len(g.replies) > 0 {
		if g.Tx.Free() == 0 && len(g.Tx.Used()) == 0 {
			return false
		}
		var bufs [1][]byte
		bufs[0] = g.replies[0]
		if _, err := g.Tx.AddChain(bufs[:], nil); err != nil {
			return false
		}
		g.replies = g.replies[1:]
	}
	return true
}

// Wait blocks until the device signals rx or timeout passes.
func (g *Guest) Wait(timeout time.Duration) {
	if g.Rx.EnableInterrupts() {
		return
	}
	g.Rx.Irq.Wait(timeout)
}

// Recv waits up to timeout for a frame for which keep returns true, while
// answering ARP, ping and echo.
func (g *Guest) Recv(timeout time.Duration, keep func(frame []byte) bool) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	var got []byte
	for got == nil {
		g.Poll(func(f []byte) {
			if got == nil && keep(f) {
				got = append([]byte(nil), f...)
			}
		})
		if got != nil {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("guestdrv: no matching frame within %v", timeout)
		}
		g.Wait(min(left, 10*time.Millisecond))
	}
	return got, nil
}

// TxInFlight is the number of tx chains the device has not returned.
func (g *Guest) TxInFlight() int { return int(g.Tx.Size) - g.Tx.Free() }

// WaitTxOrRx sleeps until the device returned tx buffers (asking, like
// Linux's virtqueue_enable_cb_delayed, only once 3/4 of those in flight are
// done) or delivered rx frames, or timeout passes.
func (g *Guest) WaitTxOrRx(timeout time.Duration) {
	inflight := uint16(g.TxInFlight())
	lastUsed := g.Tx.AvailIdx() - inflight
	if inflight > 0 {
		if g.Tx.EventIdx {
			g.Tx.SetUsedEvent(lastUsed + inflight*3/4)
		} else {
			g.Tx.EnableInterrupts()
		}
	}
	rxMore := g.Rx.EnableInterrupts()
	if done := g.Tx.UsedIdx() - lastUsed; !rxMore && (inflight == 0 || done <= inflight*3/4) {
		g.Rx.Irq.Wait(timeout)
	}
	g.Tx.DisableInterrupts()
}
