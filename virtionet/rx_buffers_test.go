package virtionet

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio/virtiotest"
)

// With MRG_RXBUF and GUEST_TSO a frame may need 64 KiB of buffers, more
// than a small ring of 1.5 KiB buffers ever holds. The device must still
// deliver the frames that fit, and drop (counted) one that can never fit,
// at every ring size (issue 13, D1: it used to wait for 64 KiB forever).
func testRxSmallRingNeverStalls(t *testing.T, io IOMode) {
	for _, size := range []uint16{16, 32, 64, 128, 256} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			r := newRig(t, rigOptions{io: io, size: size, rxBufSize: 1536})
			if r.feat&FeatGuestTSO4 == 0 || r.feat&FeatMrgRxBuf == 0 {
				t.Fatal("the rig does not ack GUEST_TSO4 and MRG_RXBUF")
			}
			r.rx.AddRxBuffers(int(size), 1536)
			r.activate()
			big := r.txFrame(1, 30000) // needs 20 buffers: more than a 16-entry ring
			small := r.txFrame(2, 1000)
			r.peerWrite(big)
			r.peerWrite(small)
			var used []virtiotest.UsedElem
			want := 1
			if size > 16 {
				want = 21 // 20 for the big frame, one for the small
			}
			r.waitUsed(r.rx, want, func(u virtiotest.UsedElem) { used = append(used, u) })
			if size > 16 {
				got, n, err := r.rx.ReadMergeable(used, nil)
				if err != nil || n != 20 || !bytes.Equal(got[12:], big[12:]) {
					t.Fatalf("big frame: %d buffers, %v, equal %v", n, err, bytes.Equal(got[12:], big[12:]))
				}
				used = used[n:]
			} else if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
				t.Errorf("a 16-entry ring: %d too-big drops, want 1", d)
			}
			got, n, err := r.rx.ReadMergeable(used, nil)
			if err != nil || n != 1 || !bytes.Equal(got[12:], small[12:]) {
				t.Errorf("small frame: %d buffers, %v", n, err)
			}
		})
	}
}

// An rx buffer of exactly the largest frame for the offered MTU, and a
// backend that hands over a larger frame (a tap whose MTU is larger): the
// frame is dropped and counted, never delivered cut (issue 13, D2).
func testRxFrameLargerThanMTUIsDropped(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatMAC) // no MRG_RXBUF: one chain per frame
	r := newRig(t, rigOptions{io: io, features: feat, rxBufSize: 1530})
	r.rx.AddRxBuffers(2, uint32(maxRxFrame(feat, DefaultMTU)))
	r.activate()
	r.peerWrite(r.txFrame(0, 9000-12))
	r.peerWrite(r.txFrame(1, 60))
	var lens []uint32
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { lens = append(lens, u.Len) })
	if lens[0] != 72 {
		t.Errorf("used length %d, want the 72-byte frame", lens[0])
	}
	if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
		t.Errorf("too-big drops %d, want 1", d)
	}
}

// Without MRG_RXBUF, rx buffers of 16 KiB, and a backend that hands over
// a 9000-byte frame (a tap whose MTU is larger than the guest's 1500):
// the buffers would hold it, but it is longer than any frame the guest
// may get, so it is dropped and counted (issue 28, D2).
func testRxFrameOverMaxInLargeBuffersIsDropped(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatMAC)
	r := newRig(t, rigOptions{io: io, features: feat, rxBufSize: 16 << 10})
	r.rx.AddRxBuffers(2, 16<<10)
	r.activate()
	r.peerWrite(r.txFrame(0, 9000-12))
	r.peerWrite(r.txFrame(1, 60))
	var lens []uint32
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { lens = append(lens, u.Len) })
	if lens[0] != 72 {
		t.Errorf("used length %d, want the 72-byte frame", lens[0])
	}
	if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
		t.Errorf("too-big drops %d, want 1", d)
	}
}

// With MRG_RXBUF and without GUEST_TSO, fewer buffers than a frame needs
// send a frame through the bounce buffer, where one bigger than the
// buffers posted waits for more. One longer than the guest's largest
// frame must not wait (it can never be delivered): it is dropped and
// counted at once, and the next frame takes the buffer (issue 28, D2).
func testRxFrameOverMaxIsNotHeld(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatMAC | FeatMrgRxBuf)
	r := newRig(t, rigOptions{io: io, features: feat, rxBufSize: 1024})
	r.rx.AddRxBuffers(1, 1024) // less than a largest frame: read through the bounce buffer
	r.activate()
	r.peerWrite(r.txFrame(0, 9000-12))
	r.peerWrite(r.txFrame(1, 60))
	var used []virtiotest.UsedElem
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { used = append(used, u) })
	if used[0].Len != 72 {
		t.Errorf("used length %d, want the 72-byte frame", used[0].Len)
	}
	if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
		t.Errorf("too-big drops %d, want 1", d)
	}
}

// A 64-entry ring with 40 posted 1536-byte buffers (60 KiB) and a 65 KB
// frame (GUEST_TSO): Linux refills only when more than 32 descriptors are
// free, so those 40 are all the guest will post. The frame is dropped and
// counted, and the next frame takes a buffer; the device used to hold it
// until the whole ring was posted, for ever (issue 28, D1).
func testRxHeldFrameDroppedWhenBuffersCannotGrow(t *testing.T, io IOMode) {
	feat := uint64(FeatVersion1 | FeatMAC | FeatMrgRxBuf | FeatGuestCsum | FeatGuestTSO4)
	r := newRig(t, rigOptions{io: io, features: feat, size: 64, rxBufSize: 1536})
	r.rx.AddRxBuffers(40, 1536)
	r.activate()
	r.peerWrite(r.txFrame(0, 65000))
	r.peerWrite(r.txFrame(1, 60))
	var used []virtiotest.UsedElem
	r.waitUsed(r.rx, 1, func(u virtiotest.UsedElem) { used = append(used, u) })
	if used[0].Len != 72 {
		t.Errorf("used length %d, want the 72-byte frame", used[0].Len)
	}
	if d := r.stats(rxQueue).Drops[DropRxTooBig.String()]; d != 1 {
		t.Errorf("too-big drops %d, want 1", d)
	}
}

// A tx chain of more buffers than writev takes, whose tail is
// device-writable, is dropped like any tx chain with a writable buffer
// (issue 13, D7: the copying path skipped that check).
func testTxLongChainWithWritableTailIsDropped(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, size: 2048, rxBufSize: 16, txBufSize: 16})
	r.activate()
	f := r.txFrame(5, 1100*8)
	var parts [][]byte
	for i := 0; i < len(f); i += 8 {
		parts = append(parts, f[i:min(i+8, len(f))])
	}
	if _, err := r.tx.AddChain(parts, []uint32{16}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.tx.AddChain([][]byte{r.txFrame(1, 4)}, nil); err != nil {
		t.Fatal(err)
	}
	r.tx.Kick()
	if got := r.peerRead(); !bytes.Equal(got, r.txFrame(1, 4)) {
		t.Fatalf("got %d bytes, want the 16-byte frame after the dropped one", len(got))
	}
	r.waitUsed(r.tx, 2, nil)
	if s := r.stats(txQueue); s.Drops[DropTxWritable.String()] != 1 || s.Frames != 1 {
		t.Errorf("tx stats %+v", s)
	}
}

// holeIO is a frame-I/O whose recv fills the slots it is told to and
// leaves the others without a frame, as io_uring does when a frame lands
// after a read of the same wave found the backend empty.
type holeIO struct {
	vectorIO
	frames map[int][]byte
	slots  int
}

func (h *holeIO) recv(fd int, slots [][]unix.Iovec, got []int) (int, int, error) {
	for i := 0; i < h.slots; i++ {
		got[i] = -int(unix.EAGAIN)
		if f, ok := h.frames[i]; ok {
			scatter(slots[i], f)
			got[i] = len(f)
		}
	}
	return h.slots, 1, unix.EAGAIN
}

// Frames after a slot left empty move down, so that frames take chains in
// order and the chains left over go back to the guest unused.
func TestRxFramesMoveDownPastAnEmptySlot(t *testing.T) {
	r := newRig(t, rigOptions{features: FeatVersion1 | FeatMAC | FeatMrgRxBuf})
	r.rx.AddRxBuffers(4, 2048)
	w, err := newWorker(r.dev, r.dev.pairs[0], r.drv.Activation(r.feat, r.rx, r.tx))
	if err != nil {
		t.Fatal(err)
	}
	defer w.closePoll()
	first, late := r.txFrame(0, 64), r.txFrame(1, 100)
	w.io = &holeIO{frames: map[int][]byte{0: first, 2: late}, slots: 3}
	w.handleRx()
	var frames [][]byte
	for _, u := range r.rx.Used() {
		frames = append(frames, r.rx.ReadBuf(u, nil))
	}
	if len(frames) != 2 || !bytes.Equal(frames[0][12:], first[12:]) || !bytes.Equal(frames[1][12:], late[12:]) {
		t.Fatalf("got %d frames, want the two in order", len(frames))
	}
	if k := w.rx.unconsumed(); k != 2 || !w.q[rxQueue].HasAvail() {
		t.Errorf("%d chains given back for the next frames, want 2", k)
	}
}

// A frame bigger than the buffers posted waits for more; the driver's
// next buffers must bring a kick (avail_event just past what the device
// saw, not past the buffers it gave back), and then the frame arrives.
func testRxHeldFrameWaitsForOneMoreKick(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io, size: 64, rxBufSize: 1536})
	r.rx.AddRxBuffers(10, 1536) // 15 KiB
	r.activate()
	big := r.txFrame(1, 20000) // 14 buffers
	r.peerWrite(big)
	waitFor(t, "the device to find too few buffers", func() bool { return r.stats(rxQueue).NoBuffers > 0 })
	r.rx.AddRxBuffers(10, 1536)
	if !r.rx.Kick() {
		t.Fatalf("the driver was not asked to kick for new buffers (avail_event %d, avail idx %d)", r.rx.AvailEvent(), r.rx.AvailIdx())
	}
	var used []virtiotest.UsedElem
	r.waitUsed(r.rx, 14, func(u virtiotest.UsedElem) { used = append(used, u) })
	if got, n, err := r.rx.ReadMergeable(used, nil); err != nil || n != 14 || !bytes.Equal(got[12:], big[12:]) {
		t.Errorf("held frame: %d buffers, %v", n, err)
	}
}

// In poll mode a burst that uses up the guest's rx buffers leaves rx
// kicks off: buffers the driver gives back while the worker polls are
// filled without a kick, and once the poll is over a device out of
// buffers asks for a kick again.
func testRxPollModeKeepsKicksOff(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.NotifyThreshold, tun.PollUs = 8, 400_000
	r := newRig(t, rigOptions{io: io, tuning: tun})
	frame := 0
	burst := func(n int) {
		for i := 0; i < n; i++ {
			r.peerWrite(r.txFrame(frame, 64))
			frame++
		}
	}
	// Buffers and frames before DRIVER_OK: the worker's first run fills
	// every buffer, a burst, so it polls.
	r.rx.AddRxBuffers(8, 2048)
	r.rx.Kick()
	burst(8)
	r.activate()
	r.waitUsed(r.rx, 8, nil)
	burst(4) // waits in the backend
	r.rx.AddRxBuffers(8, 2048)
	if r.rx.Kick() {
		t.Fatal("the driver was asked to kick for rx buffers while the device polls")
	}
	r.waitUsed(r.rx, 4, nil)
	burst(4)
	r.waitUsed(r.rx, 4, nil) // the buffers are used up again
	// The poll ends (400 ms after the last frame moved) with the device
	// out of buffers: it asks for a kick again, and gets the next frame
	// into the next buffer.
	waitFor(t, "rx kicks back on", func() bool { return r.rx.AvailEvent() == r.rx.AvailIdx() })
	burst(1)
	r.rx.AddRxBuffers(1, 2048)
	if !r.rx.Kick() {
		t.Fatal("after the poll the driver was not asked to kick for a buffer")
	}
	r.waitUsed(r.rx, 1, nil)
	if k := r.stats(rxQueue).Kicks; k != 2 {
		t.Errorf("device saw %d rx kicks, want 2 (before DRIVER_OK, after the poll)", k)
	}
}

// A lone frame takes a few rx chains off the ring, not a whole batch's
// worth (each one popped and given back costs time on a ping's path),
// while frames that wait take more with each pop, within one batch.
// Without GUEST_TSO every 2048-byte buffer holds a whole frame.
func testRxLoneFramePopsFewChains(t *testing.T, io IOMode) {
	popped := func(r *rig) (most int) {
		for _, line := range strings.Split(r.trace.String(), "\n") {
			if _, v, ok := strings.Cut(line, " rx popped chains="); ok {
				n, _ := strconv.Atoi(v)
				most = max(most, n)
			}
		}
		return most
	}
	features := uint64(FeatVersion1 | FeatMAC | FeatMrgRxBuf)
	r := newRig(t, rigOptions{io: io, features: features})
	r.rx.AddRxBuffers(64, 2048)
	r.activate()
	r.rx.Kick()
	r.peerWrite(r.txFrame(0, 64))
	r.waitUsed(r.rx, 1, nil)
	if most := popped(r); most == 0 || most > minRxPop {
		t.Errorf("a lone frame: the most chains popped at once was %d, want 1..%d\n%s", most, minRxPop, r.trace.String())
	}
	r = newRig(t, rigOptions{io: io, features: features})
	r.rx.AddRxBuffers(64, 2048)
	for i := 0; i < 40; i++ {
		r.peerWrite(r.txFrame(i, 64))
	}
	r.activate()
	r.waitUsed(r.rx, 40, nil)
	if most, batches := popped(r), r.stats(rxQueue).Batches; most < 36 || len(batches) != 1 || batches["32-63"] != 1 {
		t.Errorf("40 waiting frames: the most chains popped at once was %d, want 36 or more, in one batch (%v)\n%s", most, batches, r.trace.String())
	}
}

// With MRG_RXBUF and GUEST_TSO a frame may need 64 KiB of buffers, but a
// Linux guest posts 1.5 KiB ones and most frames (ACKs, a request, a
// ping) fit one. Each frame takes chains for about the size of the
// frames before it, not for the largest frame: a small frame pops one
// chain (and one more it looks at for a next frame), not 43 to give 42
// back. A longer one spills into the bounce
// buffer and takes more chains after the read, intact; one longer than
// every buffer posted waits for more, intact.
func testRxMergeableChainsFollowFrameSize(t *testing.T, io IOMode) {
	popped := func(r *rig) (total int) {
		for _, line := range strings.Split(r.trace.String(), "\n") {
			if _, v, ok := strings.Cut(line, " rx popped chains="); ok {
				n, _ := strconv.Atoi(v)
				total += n
			}
		}
		return total
	}
	r := newRig(t, rigOptions{io: io, size: 256, rxBufSize: 1536})
	if r.feat&FeatGuestTSO4 == 0 || r.feat&FeatMrgRxBuf == 0 {
		t.Fatal("the rig does not ack GUEST_TSO4 and MRG_RXBUF")
	}
	r.rx.AddRxBuffers(200, 1536)
	r.activate()
	r.rx.Kick()
	check := func(what string, frame []byte, buffers int) {
		t.Helper()
		var used []virtiotest.UsedElem
		r.peerWrite(frame)
		r.waitUsed(r.rx, buffers, func(u virtiotest.UsedElem) { used = append(used, u) })
		got, n, err := r.rx.ReadMergeable(used, nil)
		if err != nil || n != buffers || !bytes.Equal(got[12:], frame[12:]) {
			t.Fatalf("%s: %d buffers (want %d), %v, intact %v", what, n, buffers, err, bytes.Equal(got[12:], frame[12:]))
		}
	}
	for i := 0; i < 10; i++ {
		check("small frame", r.txFrame(i, 100), 1)
	}
	if p := popped(r); p > 2*10+minRxPop {
		t.Errorf("10 lone small frames popped %d chains, want at most two each\n%s", p, tail(r.trace.String()))
	}
	check("a frame after small ones", r.txFrame(20, 30000), 20)
	check("the next small frame", r.txFrame(21, 100), 1)
	if s := r.stats(rxQueue).Spills; s != 1 {
		t.Errorf("%d frames counted spilled, want 1 (the 30000-byte one)", s)
	}
	if d := r.stats(rxQueue).Drops; len(d) > 0 {
		t.Errorf("drops %v", d)
	}
	// Longer than every buffer posted: held, then delivered whole.
	r2 := newRig(t, rigOptions{io: io, size: 64, rxBufSize: 1536})
	r2.rx.AddRxBuffers(4, 1536)
	r2.activate()
	r2.rx.Kick()
	r2.peerWrite(r2.txFrame(0, 100))
	r2.waitUsed(r2.rx, 1, nil)
	big := r2.txFrame(1, 9000) // 6 buffers; 3 posted
	r2.peerWrite(big)
	waitFor(t, "the device to find too few buffers", func() bool { return r2.stats(rxQueue).NoBuffers > 0 })
	r2.rx.AddRxBuffers(10, 1536)
	r2.rx.Kick()
	var used []virtiotest.UsedElem
	r2.waitUsed(r2.rx, 6, func(u virtiotest.UsedElem) { used = append(used, u) })
	if got, n, err := r2.rx.ReadMergeable(used, nil); err != nil || n != 6 || !bytes.Equal(got[12:], big[12:]) {
		t.Errorf("held spilled frame: %d buffers, %v, intact %v", n, err, bytes.Equal(got[12:], big[12:]))
	}
}
