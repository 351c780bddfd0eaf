package usernetd

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/userproc"
)

// ACKs that come late, as when the device's worker or the gateway's
// process is not scheduled for a while (in a slow VM, every few
// milliseconds), are not losses: a transfer to a Linux stack playing the
// guest whose ACKs to the gateway stop for 60 ms a few times must go
// through with no retransmission other than the retransmission timer's
// (which a machine stalled for 200 ms may fire). With RACK's tail loss
// probes, each stall sent a probe after two round trips.
func TestLateACKsCostNoRetransmission(t *testing.T) {
	ns, mac, tapFd := tapNS(t, "tvla0", GuestIP+"/24", userproc.Offloads)
	ln, port := hostListener(t)
	const size = 16 << 20
	go serveZeros(ln, size)
	b := open(t, Config{MAC: mac})
	var toGuest superFrames
	bridge(t, b, userproc.Offloads,
		func(ctx context.Context) { pump(ctx, b.Fd(), tapFd, &toGuest) },
		func(ctx context.Context) { stallingPump(ctx, tapFd, b.Fd()) })

	c := dialFrom(t, ns, port)
	defer c.Close()
	if n, err := io.Copy(io.Discard, c); err != nil || n != size {
		t.Fatalf("the guest received %d bytes (%v), want %d", n, err, size)
	}
	st := b.vn.stack.Stats().TCP
	rex, rto := st.Retransmits.Value(), st.Timeouts.Value()
	t.Logf("retransmitted segments %d, retransmission timeouts %d", rex, rto)
	if rex > 0 && rto == 0 {
		t.Errorf("%d segments retransmitted with no timeout: late ACKs were taken for losses", rex)
	}
}

// stallingPump copies frames from one fd to the other until ctx ends, and
// holds them back for 60 ms after every 40th frame.
func stallingPump(ctx context.Context, from, to int) {
	buf := make([]byte, 70000)
	for n := 1; ctx.Err() == nil; {
		unix.Poll([]unix.PollFd{{Fd: int32(from), Events: unix.POLLIN}}, 20)
		k, err := unix.Read(from, buf)
		if err != nil || k <= maxVnetHdr {
			continue
		}
		if n%40 == 0 {
			time.Sleep(60 * time.Millisecond)
		}
		n++
		for ctx.Err() == nil {
			if _, err := unix.Write(to, buf[:k]); !errors.Is(err, unix.EAGAIN) {
				break
			}
			unix.Poll([]unix.PollFd{{Fd: int32(to), Events: unix.POLLOUT}}, 20)
		}
	}
}
