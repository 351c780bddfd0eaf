package virtionet

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/netbackend"
	"tinyvmm/virtio/virtiotest"
)

// FuzzCtrlQueue sends a two-pair device's control queue whatever chains
// the input describes (any number of readable and writable buffers of any
// length, so any class, command and data), then optionally overwrites the
// ring with raw descriptors. Each command must be answered VIRTIO_NET_OK
// exactly when it is a well-formed VQ_PAIRS_SET of 1 or 2 pairs and
// VIRTIO_NET_ERR otherwise, the active pairs must follow the last good
// one, and Reset must return: no panic, no hang.
//
// cmds holds records: a layout byte (bits 0-1 readable buffers, bits 2-3
// writable ones), then each readable buffer's length (mod 9) and bytes,
// then each writable buffer's length (mod 4).
func FuzzCtrlQueue(f *testing.F) {
	f.Add([]byte{0x05, 2, 4, 0, 2, 2, 0, 1}, []byte{}, uint16(0))                         // VQ_PAIRS_SET 2, as Linux lays it out
	f.Add([]byte{0x05, 2, 4, 0, 2, 0, 0, 1, 0x04, 4, 4, 0, 1, 0, 1}, []byte{}, uint16(0)) // pairs 0, then 1 in one buffer
	f.Add([]byte{0x01, 3, 0, 1, 1}, []byte{}, uint16(0))                                  // no writable buffer
	f.Add([]byte{0x0d, 1, 4, 0, 0, 0, 1}, []byte{1, 2, 3}, uint16(3))                     // raw descriptors over it
	f.Fuzz(func(t *testing.T, cmds, raw []byte, rawIdx uint16) {
		sps, err := netbackend.NewSocketPairs(2)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			for _, sp := range sps.Pairs {
				unix.Close(sp.Peer)
			}
		}()
		d, err := New(Config{Ifname: "fuzz0", Queues: 2, IO: IOWritev, Tuning: DefaultTuning()}, sps)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		drv := virtiotest.New(256 << 10)
		defer drv.Close()
		var rings []*virtiotest.Ring
		for range 4 {
			r, err := drv.NewQueue(8, virtiotest.RingOptions{BufSize: 64, EventIdx: true})
			if err != nil {
				t.Fatal(err)
			}
			rings = append(rings, r)
		}
		ctrl, err := drv.NewQueue(16, virtiotest.RingOptions{BufSize: 16, EventIdx: true})
		if err != nil {
			t.Fatal(err)
		}
		type sent struct {
			in         []byte
			answerable bool
		}
		var want []sent
		for len(cmds) > 0 && len(want) < 16 {
			layout := cmds[0]
			cmds = cmds[1:]
			var out [][]byte
			var in []byte
			for range layout & 3 {
				if len(cmds) == 0 {
					break
				}
				n := min(int(cmds[0])%9, len(cmds)-1)
				out = append(out, cmds[1:1+n])
				in = append(in, cmds[1:1+n]...)
				cmds = cmds[1+n:]
			}
			var lens []uint32
			answerable := false
			for range layout >> 2 & 3 {
				if len(cmds) == 0 {
					break
				}
				lens = append(lens, uint32(cmds[0]%4))
				answerable = answerable || cmds[0]%4 > 0
				cmds = cmds[1:]
			}
			if _, err := ctrl.AddChain(out, lens); err != nil {
				continue // empty, or the ring is full
			}
			want = append(want, sent{in, answerable})
		}
		overwritten := len(raw) > 0
		if overwritten {
			for i := uint16(0); i < 16 && len(raw) > 0; i++ {
				var b [16]byte
				raw = raw[copy(b[:], raw):]
				v, w := binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:])
				ctrl.WriteDesc(i, virtiotest.RawDesc{
					Addr: v % uint64(len(drv.Mem)+0x1000), Len: uint32(w) % 64,
					Flags: uint16(w>>32) & 7, Next: uint16(w>>48) % 20,
				})
				ctrl.SetAvailRing(i, uint16(v>>48)%20)
			}
			ctrl.SetAvailIdx(rawIdx)
		}
		// The rings are written before the device starts: a guest that
		// rewrites published descriptors races the device by design
		// (each is read once into locals), and the race detector would
		// report the test's own writes.
		if err := d.Activate(drv.Activation(d.Features(), append(rings, ctrl)...)); err != nil {
			t.Fatal(err)
		}
		ctrl.ForceKick()

		if !overwritten {
			// Well-formed rings: every command gets its answer, in order.
			pairs := 1
			got := 0
			deadline := time.Now().Add(5 * time.Second)
			for got < len(want) {
				for _, u := range ctrl.Used() {
					w := want[got]
					ok := len(w.in) == 4 && w.in[0] == 4 && w.in[1] == 0 &&
						binary.LittleEndian.Uint16(w.in[2:]) >= 1 && binary.LittleEndian.Uint16(w.in[2:]) <= 2
					switch {
					case !w.answerable && u.Len != 0:
						t.Fatalf("command %d (%x): %d bytes written with no writable byte", got, w.in, u.Len)
					case w.answerable && u.Len != 1:
						t.Fatalf("command %d (%x): answer of %d bytes", got, w.in, u.Len)
					case w.answerable:
						ack := ctrl.ReadBuf(u, nil)[0]
						if (ack == ctrlOK) != ok || ack > ctrlErr {
							t.Fatalf("command %d (%x): answer %d, want OK %v", got, w.in, ack, ok)
						}
						if ok {
							pairs = int(binary.LittleEndian.Uint16(w.in[2:]))
						}
					}
					got++
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d commands answered", got, len(want))
				}
				time.Sleep(50 * time.Microsecond)
			}
			if n := d.ActivePairs(); n != pairs {
				t.Fatalf("%d pairs active, want %d", n, pairs)
			}
			if f := drv.Failures(); len(f) > 0 {
				t.Fatalf("well-formed chains broke the device: %v", f)
			}
		} else {
			time.Sleep(200 * time.Microsecond)
		}
		done := make(chan struct{})
		go func() { d.Reset(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Reset hung")
		}
		if n := d.ActivePairs(); n != 0 {
			t.Fatalf("%d pairs active after Reset", n)
		}
		if n := len(drv.Failures()); n > 1 {
			t.Errorf("%d failures from one control queue", n)
		}
	})
}
