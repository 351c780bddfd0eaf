package virtionet

import (
	"encoding/binary"
	"testing"
	"time"

	"tinyvmm/virtio/virtiotest"
)

// FuzzDeviceRings lets a hostile guest write both queues' descriptor
// tables and avail rings with anything, then kick and send a frame. The
// device must neither panic nor hang: Reset returns, and a broken queue is
// reported through Fail at most once.
func FuzzDeviceRings(f *testing.F) {
	f.Add(make([]byte, 64), uint16(1), uint16(1), false)
	f.Add([]byte{0: 1, 8: 0xff, 12: 1, 13: 0, 14: 0}, uint16(3), uint16(0xffff), true)
	f.Add(make([]byte, 65), uint16(2), uint16(3), true)
	f.Fuzz(func(t *testing.T, data []byte, rxIdx, txIdx uint16, oneFramePerCall bool) {
		// The frame-I/O: sendmmsg, or one frame per call, by writev or
		// (an odd length of data, otherwise only padding) io_uring; the
		// inputs keep their types so that a corpus stays valid.
		io := IOSendmmsg
		if oneFramePerCall {
			io = IOWritev
			if len(data)%2 == 1 && uringWorks() {
				io = IOUring
			}
		}
		r := newRig(t, rigOptions{size: 8, rxBufSize: 256, txBufSize: 256, io: io, mem: 64 << 10})
		mem := uint64(len(r.drv.Mem))
		next := func() uint64 {
			if len(data) < 8 {
				data = append(data, make([]byte, 8)...)
			}
			v := binary.LittleEndian.Uint64(data)
			data = data[8:]
			return v
		}
		for _, ring := range []*virtiotest.Ring{r.rx, r.tx} {
			for i := uint16(0); i < 8; i++ {
				v, w := next(), next()
				ring.WriteDesc(i, virtiotest.RawDesc{
					Addr: v % (mem + 0x1000), Len: uint32(w) % 4096,
					Flags: uint16(w>>32) & 7, Next: uint16(w>>48) % 12,
				})
				ring.SetAvailRing(i, uint16(v>>48)%10)
			}
		}
		r.rx.SetAvailIdx(rxIdx)
		r.tx.SetAvailIdx(txIdx)
		r.activate()
		r.peerWrite(r.txFrame(0, 100))
		r.rx.ForceKick()
		r.tx.ForceKick()
		time.Sleep(100 * time.Microsecond)
		done := make(chan struct{})
		go func() { r.dev.Reset(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Reset hung: the worker is stuck")
		}
		if n := len(r.drv.Failures()); n > 2 {
			t.Errorf("%d failures for two queues", n)
		}
	})
}
