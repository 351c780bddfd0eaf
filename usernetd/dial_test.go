package usernetd

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
)

var loopback = tcpip.AddrFrom4([4]byte{127, 0, 0, 1})

func listenerPort(tb testing.TB) (net.Listener, uint16) {
	ln, port := hostListener(tb)
	p, _ := strconv.Atoi(port)
	return ln, uint16(p)
}

// The NAT's dial connects (data goes both ways, keepalive and
// TCP_NODELAY as net.Dial sets them), and a refused connect is
// ECONNREFUSED.
func TestDialHostConnectsAndRefuses(t *testing.T) {
	ln, port := listenerPort(t)
	c, err := dialHost(loopback, port, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.RemoteAddr().String(), c.LocalAddr().String(); got != want {
		t.Fatalf("server sees %s, the dial's end is %s", got, want)
	}
	if _, err := c.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "GET" {
		t.Fatalf("server read %q, %v", buf, err)
	}
	s.Write([]byte("ok"))
	s.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
		t.Fatalf("dial's end read %q, %v", b, err)
	}
	rc, _ := c.SyscallConn()
	rc.Control(func(fd uintptr) {
		if v, _ := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); v == 0 {
			t.Error("no keepalive")
		}
		if v, _ := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY); v == 0 {
			t.Error("no TCP_NODELAY")
		}
	})

	ln.Close() // its port now refuses
	if c, err := dialHost(loopback, port, 5*time.Second); !errors.Is(err, unix.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial of a closed port: %v, want ECONNREFUSED", err)
	}
}

// A host that does not answer the SYN (a listener whose accept queue is
// full drops it) ends the dial after its timeout, with ETIMEDOUT.
func TestDialHostTimesOut(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil { // one connection fills it
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(sa.(*unix.SockaddrInet4).Port)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 4; i++ {
		start := time.Now()
		c, err := dialHost(loopback, port, 200*time.Millisecond)
		if err == nil {
			conns = append(conns, c)
			continue
		}
		if !errors.Is(err, unix.ETIMEDOUT) {
			t.Fatalf("dial %d: %v, want ETIMEDOUT", i, err)
		}
		if d := time.Since(start); d < 100*time.Millisecond || d > 30*time.Second {
			t.Fatalf("dial %d timed out after %v, its timeout 200ms", i, d)
		}
		return
	}
	t.Fatalf("%d dials of a full listener all connected", len(conns))
}

// On loopback the NAT's dial does not give up its P: with one P, a
// goroutine made runnable before the dial has not run when it returns.
// net.Dial parks on the poller after connect's EINPROGRESS, and the
// goroutine runs then, every time. (A system call the scheduler takes
// the P from can let it run too: one dial of five that keeps the P
// passes.)
func TestNATDialKeepsItsP(t *testing.T) {
	ln, port := listenerPort(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func(v bool) { natRawDial = v }(natRawDial)
	natRawDial = true
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	kept := 0
	for i := 0; i < 5; i++ {
		var ran atomic.Bool
		go ran.Store(true)
		c, err := dialNAT(loopback, port)
		r := ran.Load()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		for !ran.Load() {
			runtime.Gosched()
		}
		if !r {
			kept++
		}
	}
	if kept == 0 {
		t.Fatal("every dial let another goroutine run: it waited on the poller")
	}
}
