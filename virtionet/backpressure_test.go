package virtionet

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// A backend with no room for a frame (EAGAIN: a socketpair whose send
// buffer is small, as an unprivileged user's is) holds tx back instead of
// dropping frames: the chains wait in the ring, and once the peer reads,
// every frame arrives, in order, none dropped. With one writev per frame
// (as on a tap) and with sendmmsg (the user network's link).
func TestTxWaitsForRoomInTheBackend(t *testing.T) {
	for _, io := range []IOMode{IOWritev, IOSendmmsg} {
		t.Run(string(io), func(t *testing.T) {
			const n, payload = 200, 1000
			r := newRig(t, rigOptions{io: io})
			// The smallest buffer Linux gives holds a few such frames.
			if err := unix.SetsockoptInt(r.sp.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 1); err != nil {
				t.Fatal(err)
			}
			r.txBurst(n, payload)
			r.activate()
			// The peer reads nothing until the device has found the
			// socket full: it must, with n frames and room for a few.
			waitFor(t, "the device to find the socket full", func() bool {
				s := r.stats(txQueue)
				return s.BackendFull > 0 || s.Drops[DropTxWriteError.String()] > 0
			})
			for i := range n {
				if got, want := r.peerRead(), r.txFrame(i, payload); !bytes.Equal(got, want) {
					t.Fatalf("frame %d: got %d bytes starting % x, want frame %d (%d bytes)\n%s",
						i, len(got), got[r.hdrLen():r.hdrLen()+4], i, len(want), r.dev.Stats())
				}
			}
			r.waitUsed(r.tx, n, nil)
			s := r.stats(txQueue)
			if s.Frames != n || s.Drops != nil {
				t.Errorf("%d frames sent, drops %v; want %d and none", s.Frames, s.Drops, n)
			}
			if s.BackendFull == 0 {
				t.Error("no wait for room counted")
			}
		})
	}
}
