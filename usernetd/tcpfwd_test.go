package usernetd

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeConn is one end of a spliced connection: Read hands out size bytes
// in reads as large as asked for (a sender that is always ahead), Write
// notes the size of each write, and the half closes are counted.
type fakeConn struct {
	net.Conn
	mu                    sync.Mutex
	left                  int
	writes                []int
	closedRead, closedWrt bool
}

func (c *fakeConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(b), c.left)
	c.left -= n
	return n, nil
}

func (c *fakeConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, len(b))
	return len(b), nil
}

func (c *fakeConn) CloseRead() error  { c.mu.Lock(); c.closedRead = true; c.mu.Unlock(); return nil }
func (c *fakeConn) CloseWrite() error { c.mu.Lock(); c.closedWrt = true; c.mu.Unlock(); return nil }

// A direction that always has data moves it in copies of copyBufMax once
// one read has filled the first, smaller buffer (the stack makes a segment
// of each write; 32 KiB ones reached the guest as 32 KiB pieces), and
// passes the end of data on as a half close.
func TestSpliceCopiesGrowWithTheData(t *testing.T) {
	const size = 4 << 20
	src, dst := &fakeConn{left: size}, &fakeConn{}
	pipe(dst, src, 0, trH2GRead)
	total := 0
	for _, n := range dst.writes {
		total += n
	}
	if total != size {
		t.Fatalf("copied %d bytes, want %d", total, size)
	}
	if dst.writes[0] != copyBufMin || dst.writes[1] != copyBufMax {
		t.Errorf("writes of %d, then %d bytes; want %d, then %d", dst.writes[0], dst.writes[1], copyBufMin, copyBufMax)
	}
	if !dst.closedWrt || !src.closedRead {
		t.Errorf("end of data: destination's write closed %v, source's read closed %v", dst.closedWrt, src.closedRead)
	}
}

// Through the NAT, each end of data is passed on alone: the guest sends,
// closes its writing, and still reads the host's answer, which the host
// sends only after it saw the guest's end.
func TestNATPassesHalfCloses(t *testing.T) {
	ln, port := hostListener(t)
	const size = 3 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		io.WriteString(c, strconv.FormatInt(n, 10))
	}()
	b := open(t, Config{})
	g := newTestGuest(t, b, testMAC)
	c := g.dialGatewayWithin(t, port, 30*time.Second)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(c, io.LimitReader(zeroReader{}, size)); err != nil {
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(c)
	if err != nil || string(reply) != strconv.Itoa(size) {
		t.Fatalf("the host's answer after the guest's end: %q, %v; want %d", reply, err, size)
	}
}

// A connection the host refuses, or one to a link-local address (cloud
// metadata services live there), is reset: the guest's connect fails at
// once instead of timing out.
func TestNATResetsRefusedAndLinkLocal(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closed, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close() // nothing listens there now
	b := open(t, Config{})
	g := newTestGuest(t, b, testMAC)
	for _, addr := range []string{GatewayIP + ":" + closed, "169.254.169.254:80"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := g.dial(ctx, addr)
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("%s: connected", addr)
			continue
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: no reset, the connect timed out", addr)
		}
	}
}
