package virtionet

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// testKicksAreNotRead: kicks wake the worker, yet it never spends a read
// on the kick's eventfd: the count of the kicks the driver sent is all
// still there, as under vhost-net. (Not every frame below is kicked: on
// a loaded host the driver may add one while the worker has not yet
// turned kicks back on after the frame before, and it takes that one on
// its last look.)
func testKicksAreNotRead(t *testing.T, io IOMode) {
	r := newRig(t, rigOptions{io: io})
	r.activate()
	const n = 5
	for i := 0; i < n; i++ {
		f := r.txFrame(i, 60)
		if _, err := r.tx.AddChain([][]byte{f}, nil); err != nil {
			t.Fatal(err)
		}
		r.tx.Kick()
		r.peerRead()
		r.waitUsed(r.tx, 1, nil)
	}
	var buf [8]byte
	if _, err := unix.Read(r.tx.KickFD, buf[:]); err != nil {
		t.Fatalf("the kick eventfd was read by the worker (read: %v)", err)
	}
	if got := binary.NativeEndian.Uint64(buf[:]); got != uint64(r.tx.Kicks) || got == 0 {
		t.Errorf("kick count %d, want the %d kicks the driver sent", got, r.tx.Kicks)
	}
}

// TestRxStoppedAllocatesNothing: nearly every rx run ends on an EAGAIN;
// the datapath must not allocate per run (a garbage collection is a stop
// of every thread, the device's worker included).
func TestRxStoppedAllocatesNothing(t *testing.T) {
	w := &worker{}
	if n := testing.AllocsPerRun(100, func() { w.rxStopped(unix.EAGAIN) }); n != 0 {
		t.Errorf("rxStopped(EAGAIN): %v allocations per call, want 0", n)
	}
	if !isIOFailure(&ioFailure{errors.New("x")}) || isIOFailure(unix.EAGAIN) {
		t.Error("isIOFailure does not tell an ioFailure")
	}
}
