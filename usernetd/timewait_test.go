package usernetd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/scratchns"
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
	bridge(t, b, userproc.Offloads, bothWays(b.Fd(), tapFd)...)

	const srcPort = 45158
	for i := range 3 {
		c, err := dialFromPort(ns, srcPort, port)
		if err != nil {
			t.Fatalf("connection %d from port %d: %v", i+1, srcPort, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if got, err := io.ReadAll(c); err != nil || string(got) != "bye" {
			t.Fatalf("connection %d: %q, %v", i+1, got, err)
		}
		c.Close()
	}
}

// dialFromPort connects from the guest's srcPort to the host's port
// through the gateway, with 5 s for the handshake. Until the guest's last
// socket on srcPort is gone (it is in LAST_ACK until the gateway takes
// its FIN) the port is busy: that is waited for, up to 5 s too.
func dialFromPort(ns *scratchns.NS, srcPort int, port string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(GuestIP), Port: srcPort}, Timeout: 5 * time.Second}
	busyUntil := time.Now().Add(5 * time.Second)
	for {
		var c net.Conn
		start := time.Now()
		err := ns.Do(func() (err error) { c, err = d.Dial("tcp4", GatewayIP+":"+port); return })
		if (errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EADDRNOTAVAIL)) && time.Now().Before(busyUntil) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%v after %v", err, time.Since(start).Round(time.Millisecond))
		}
		return c, nil
	}
}
