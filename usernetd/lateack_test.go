package usernetd

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
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
	ns := netnstest.Setup(t)
	mac, err := ns.AddTap("tvla0", GuestIP+"/24")
	if err != nil {
		t.Fatal(err)
	}
	var tapFd int
	if err := ns.Do(func() (err error) { tapFd, err = openTap("tvla0", userproc.Offloads); return }); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tapFd)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 16 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, io.LimitReader(zeroReader{}, size))
	}()
	b := open(t, Config{MAC: mac})
	if err := unix.Send(b.Fd(), []byte{userproc.OffloadMsg, userproc.Offloads}, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var toGuest superFrames
	wg.Add(2)
	go func() { defer wg.Done(); pump(ctx, b.Fd(), tapFd, &toGuest) }()
	go func() { defer wg.Done(); stallingPump(ctx, tapFd, b.Fd()) }()
	defer func() { cancel(); wg.Wait() }()

	var c net.Conn
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", GatewayIP+":"+port, 20*time.Second)
		return
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(90 * time.Second))
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
