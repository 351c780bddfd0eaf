package guestdrv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"tinyvmm/virtio/virtiotest"
	"tinyvmm/virtionet"
)

// Multi is a guest of a multiqueue device: a Guest per queue pair, each
// to be driven by its own goroutine, and the control queue, which the
// goroutine that made Multi drives.
type Multi struct {
	Drv   *virtiotest.Driver
	Dev   *virtionet.Device
	Pairs []*Guest
	Ctrl  *virtiotest.Ring
}

// Control classes and commands (linux/virtio_net.h) and the answers.
const (
	CtrlClassMQ    = 4
	CtrlMQPairsSet = 0
	CtrlOK         = 0
	CtrlErr        = 1
)

// NewMulti lays out every pair the device has and the control queue,
// activates dev with MQ and CTRL_VQ acked (o.Features permitting), and
// asks for pairs queue pairs with VQ_PAIRS_SET, as Linux does at probe.
func NewMulti(dev *virtionet.Device, o Options, pairs int) (*Multi, error) {
	o = o.withDefaults()
	feat := o.features(dev)
	if feat&(virtionet.FeatMQ|virtionet.FeatCtrlVQ) != virtionet.FeatMQ|virtionet.FeatCtrlVQ {
		return nil, errors.New("guestdrv: the device does not offer (or the options do not ack) MQ and CTRL_VQ")
	}
	n := dev.Pairs()
	q := uint64(o.QueueSize)
	m := &Multi{Dev: dev, Drv: virtiotest.New(n*int(q*uint64(o.RxBufSize)+q*4096) + 1<<20)}
	var rings []*virtiotest.Ring
	for range n {
		g, err := newGuest(dev, m.Drv, o, feat)
		if err != nil {
			m.Drv.Close()
			return nil, err
		}
		m.Pairs = append(m.Pairs, g)
		rings = append(rings, g.Rx, g.Tx)
	}
	var err error
	if m.Ctrl, err = m.Drv.NewQueue(64, virtiotest.RingOptions{BufSize: 64, EventIdx: feat&virtionet.FeatEventIdx != 0}); err != nil {
		m.Drv.Close()
		return nil, err
	}
	if err := dev.Activate(m.Drv.Activation(feat, append(rings, m.Ctrl)...)); err != nil {
		m.Drv.Close()
		return nil, err
	}
	if ack, err := m.SetPairs(pairs); err != nil || ack != CtrlOK {
		m.Close()
		return nil, fmt.Errorf("guestdrv: VQ_PAIRS_SET %d: answer %d, %v", pairs, ack, err)
	}
	return m, nil
}

// SetPairs sends VQ_PAIRS_SET and returns the device's answer.
func (m *Multi) SetPairs(n int) (byte, error) {
	return m.Command(CtrlClassMQ, CtrlMQPairsSet, binary.LittleEndian.AppendUint16(nil, uint16(n)))
}

// Command sends one control command as Linux lays it out (class and
// command, the data, a one-byte answer: three buffers) and waits up to a
// few seconds for the answer.
func (m *Multi) Command(class, cmd byte, data []byte) (byte, error) {
	out := [][]byte{{class, cmd}}
	if len(data) > 0 {
		out = append(out, data)
	}
	if _, err := m.Ctrl.AddChain(out, []uint32{1}); err != nil {
		return 0, err
	}
	m.Ctrl.ForceKick()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, u := range m.Ctrl.Used() {
			if u.Len != 1 {
				return 0, fmt.Errorf("guestdrv: control answer of %d bytes", u.Len)
			}
			return m.Ctrl.ReadBuf(u, nil)[0], nil
		}
		if time.Now().After(deadline) {
			return 0, errors.New("guestdrv: no answer on the control queue")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Close resets the device and frees the rings' eventfds.
func (m *Multi) Close() {
	m.Dev.Reset()
	m.Drv.Close()
}
