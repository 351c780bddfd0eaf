package usernetd

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"tinyvmm/userproc"
)

// A guest may connect again from the source port of a connection the
// host closed first, at once: Linux picks source ports with random steps
// and reuses one to the same destination within seconds at a few hundred
// connections a second. The gateway's side of the old connection is in
// TIME_WAIT, and gVisor passes a new SYN for a 4-tuple in TIME_WAIT only
// to a listening endpoint, which the NAT has none of: the SYN was
// dropped until TIME_WAIT ended, 60 s (BenchmarkRoundTripThroughChild
// stalled that way once in a few thousand connections).
func TestGuestReusesASourcePortAtOnce(t *testing.T) {
	ns, mac, tapFd := tapNS(t, "tvtw0", GuestIP+"/24", userproc.Offloads)
	ln, port := hostListener(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "bye") // and the host closes first
			c.Close()
		}
	}()
	b := open(t, Config{MAC: mac})
	var to, from superFrames
	bridge(t, b, userproc.Offloads,
		func(ctx context.Context) { pump(ctx, b.Fd(), tapFd, &to) },
		func(ctx context.Context) { pump(ctx, tapFd, b.Fd(), &from) })

	const srcPort = 45158
	for i := range 3 {
		var c net.Conn
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(GuestIP), Port: srcPort}, Timeout: 5 * time.Second}
		start := time.Now()
		if err := ns.Do(func() (err error) { c, err = d.Dial("tcp4", GatewayIP+":"+port); return }); err != nil {
			t.Fatalf("connection %d from port %d: %v after %v", i+1, srcPort, err, time.Since(start).Round(time.Millisecond))
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if got, err := io.ReadAll(c); err != nil || string(got) != "bye" {
			t.Fatalf("connection %d: %q, %v", i+1, got, err)
		}
		c.Close()
		// The guest's side is closed (LAST_ACK, then CLOSED) once the
		// gateway has acknowledged its FIN: wait for that before the port
		// is bound again.
		time.Sleep(100 * time.Millisecond)
	}
}
