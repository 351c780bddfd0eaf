package usernetd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"tinyvmm/userproc"
)

var testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

func open(t *testing.T, cfg Config) *Backend {
	t.Helper()
	if cfg.MAC == nil {
		cfg.MAC = testMAC
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// get fetches url from inside the guest over the gateway.
func get(ctx context.Context, g *testGuest, url string) (string, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return g.dial(ctx, addr) },
	}}
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// The gateway's address reaches the host's 127.0.0.1 on the same port.
func TestGuestReachesHostLoopbackThroughGateway(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s from the host", r.URL.Path)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	b := open(t, Config{})
	g := newTestGuest(t, b, testMAC)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body, err := get(ctx, g, "http://"+GatewayIP+":"+port+"/page")
	if err != nil || body != "hello /page from the host" {
		t.Fatalf("GET through the gateway: %q, %v", body, err)
	}
}

// A hostfwd carries a host connection to the guest's port, data both
// ways, and the end of data each way.
func TestHostForwardReachesGuestPort(t *testing.T) {
	b := open(t, Config{Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 8080}}})
	g := newTestGuest(t, b, testMAC)
	ln := g.listen(t, 8080)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		in, _ := io.ReadAll(c) // until the host's CloseWrite
		c.Write(append([]byte("guest got: "), in...))
	}()
	addrs := b.Forwards()
	if len(addrs) != 1 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Fatalf("Forwards() = %v", addrs)
	}
	c, err := net.DialTimeout("tcp", addrs[0], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	msg := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16) // 64 KiB: many frames
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, append([]byte("guest got: "), msg...)) {
		t.Fatalf("reply: %d bytes (want %d), %v", len(got), len("guest got: ")+len(msg), err)
	}
}

// A forward to a port nobody listens on in the guest closes the host's
// connection instead of leaving it hanging.
func TestHostForwardToClosedGuestPortCloses(t *testing.T) {
	b := open(t, Config{Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 9}}})
	newTestGuest(t, b, testMAC)
	c, err := net.Dial("tcp", b.Forwards()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a forward to a closed port", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the forward to a closed guest port stayed open")
	}
}

// Frames the guest makes up are dropped or answered by the stack; the
// network keeps working after them.
func TestHostileFramesAreDropped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "still here") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	b := open(t, Config{})
	hdr := make([]byte, maxVnetHdr)
	gw, _ := net.ParseMAC(gatewayMAC)
	bcast := bytes.Repeat([]byte{0xff}, 6)
	frames := [][]byte{
		nil,                         // the vnet header alone
		hdr[:5],                     // shorter than the header
		make([]byte, maxVnetHdr+13), // one byte short of Ethernet
		append(append(append(append([]byte{}, hdr...), gw...), testMAC...), 0x08, 0x00),                                                              // IPv4, no IP header
		append(append(append(append([]byte{}, hdr...), bcast...), testMAC...), 0x08, 0x06, 1, 2, 3),                                                  // cut ARP
		append(append(append(append([]byte{}, hdr...), gw...), testMAC...), append([]byte{0x08, 0x00, 0x45, 0, 0xff, 0xff}, make([]byte, 40)...)...), // IP length past the frame
	}
	frames[0] = hdr
	for i, f := range frames {
		if err := unix.Send(b.Fd(), f, unix.MSG_DONTWAIT); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	big := make([]byte, 200<<10) // longer than the link's read buffer
	copy(big[maxVnetHdr:], append(append([]byte{}, gw...), testMAC...))
	unix.SetsockoptInt(b.Fd(), unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
	if err := unix.Send(b.Fd(), big, unix.MSG_DONTWAIT); err != nil {
		t.Logf("200 KiB frame not sent (%v); the socket refuses it", err)
	}
	g := newTestGuest(t, b, testMAC)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if body, err := get(ctx, g, "http://"+GatewayIP+":"+port+"/"); err != nil || body != "still here" {
		t.Fatalf("after hostile frames: %q, %v", body, err)
	}
	if d := b.Dropped(); d < 3 {
		t.Errorf("Dropped() = %d, want at least the 3 frames shorter than Ethernet", d)
	}
	if err := b.Err(); err != nil {
		t.Errorf("the switch let go of the link: %v", err)
	}
}

// Close frees the forward's port and ends its connections and goroutines.
func TestCloseFreesForwardsAndGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	b, err := Open(Config{MAC: testMAC, Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Forwards()[0]
	c, err := net.Dial("tcp", addr) // held open: the guest never answers
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port of a closed forward still taken: %v", err)
	}
	ln.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("forwarded connection still open after Close")
	}
	// gVisor's DHCP and DNS goroutines stay (see Close); ours must not.
	time.Sleep(100 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+12 {
		t.Errorf("%d goroutines before Open, %d after Close", before, after)
	}
}

func TestOpenRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MAC: net.HardwareAddr{1, 2}}, "MAC"},
		{Config{MAC: testMAC, Forwards: []Forward{{Host: "127.0.0.1:0"}}}, "guest port 0"},
		{Config{MAC: testMAC, Forwards: []Forward{{Host: "256.0.0.1:80", GuestPort: 80}}}, "hostfwd"},
	} {
		b, err := Open(tc.cfg)
		if err == nil {
			b.Close()
			t.Errorf("Open(%+v) worked", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestBackendSettings(t *testing.T) {
	b := open(t, Config{})
	if b.Offloads() != 0x03 || !b.MultiFrame() || b.Name() != "user" {
		t.Fatalf("Offloads %#x MultiFrame %v Name %q", b.Offloads(), b.MultiFrame(), b.Name())
	}
	if err := b.SetOffload(0x03); err != nil {
		t.Errorf("SetOffload(csum|tso4): %v", err)
	}
	if err := b.SetOffload(0x05); err == nil {
		t.Error("SetOffload(csum|tso6) accepted, but TSO6 was never offered")
	}
	if err := b.SetVnetHdrSize(13); err == nil {
		t.Error("SetVnetHdrSize(13) accepted")
	}
	if err := b.SetVnetHdrSize(10); err != nil || b.hdrLen.Load() != 10 {
		t.Errorf("SetVnetHdrSize(10): %v, size %d", err, b.hdrLen.Load())
	}
}

// The gateway's DNS server answers HostName with the gateway itself,
// without asking the host's resolvers.
func TestDNSAnswersHostName(t *testing.T) {
	r := askGatewayDNS(t, open(t, Config{}), HostName+".")
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != GatewayIP {
		t.Fatalf("answer for %s: %v", HostName, r.Answer)
	}
}

// askGatewayDNS asks the gateway's DNS server for name's A records from a
// test guest on b, over TCP: the test guest has no UDP.
func askGatewayDNS(t *testing.T, b *Backend, name string) *dns.Msg {
	t.Helper()
	g := newTestGuest(t, b, testMAC)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := g.dial(ctx, GatewayIP+":53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	conn := &dns.Conn{Conn: c}
	if err := conn.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	r, err := conn.ReadMsg()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A bulk transfer from the guest to the host's loopback arrives whole:
// many socket-buffers' worth of frames through the link both ways.
func TestBulkTransferToHost(t *testing.T) { bulkToHost(t, false) }

// The same from a guest that sends TSO super-frames with partial
// checksums, as Linux does once the NIC offers TSO and checksum offload.
func TestBulkTransferToHostTSO(t *testing.T) { bulkToHost(t, true) }

func bulkToHost(t *testing.T, tso bool) {
	ln, port := hostListener(t)
	const size = 16 << 20
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	b := open(t, Config{})
	g := newTestGuestOpts(t, b, testMAC, maxVnetHdr, tso)
	c := g.dialGatewayWithin(t, port, 60*time.Second)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	start := time.Now()
	if _, err := io.Copy(c, io.LimitReader(zeroReader{}, size)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := <-got; n != size {
		t.Fatalf("host received %d bytes, want %d", n, size)
	}
	t.Logf("%d MiB in %v (%.0f MiB/s; both stacks are gVisor here)", size>>20, time.Since(start).Round(time.Millisecond), float64(size>>20)/time.Since(start).Seconds())
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// hostListener listens on the host's loopback until the test ends and
// returns the listener with its port, which the guest reaches through
// the gateway.
func hostListener(tb testing.TB) (net.Listener, string) {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return ln, port
}

// serveZeros sends size zero bytes to the first connection ln accepts,
// then closes it.
func serveZeros(ln net.Listener, size int64) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	io.Copy(c, io.LimitReader(zeroReader{}, size))
}

// The device in another process sets the header size in band, with
// userproc's 2-byte message: the frames after it carry 10-byte headers,
// each way.
func TestHdrSizeMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "short headers")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	b := open(t, Config{})
	if err := unix.Send(b.Fd(), []byte{userproc.HdrSizeMsg, 10}, 0); err != nil {
		t.Fatal(err)
	}
	g := newTestGuestHdr(t, b, testMAC, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body, err := get(ctx, g, "http://"+GatewayIP+":"+port+"/")
	if err != nil || body != "short headers" {
		t.Fatalf("GET with 10-byte headers: %q, %v", body, err)
	}
	if d := b.Dropped(); d != 0 {
		t.Errorf("%d frames dropped", d)
	}
}

// Attach serves a switch end handed in (tinyvmm-usernet's fd 3); Done is
// closed once the device's end closes, as when the VMM exits.
func TestAttachEndsWhenDeviceEndCloses(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Attach(fds[1], Config{MAC: testMAC, Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Fd() != -1 || len(b.Forwards()) != 1 {
		t.Fatalf("fd %d, forwards %v", b.Fd(), b.Forwards())
	}
	select {
	case <-b.Done():
		t.Fatal("done before the device's end closed")
	case <-time.After(50 * time.Millisecond):
	}
	unix.Close(fds[0])
	select {
	case <-b.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("still serving 5 s after the device's end closed")
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A bulk transfer from the host's loopback to the guest arrives whole:
// the stack's frames to the guest go out in batches (txBatcher).
func TestBulkTransferFromHost(t *testing.T) { bulkFromHost(t, false) }

// The same to a guest that takes TSO (told in band, as the device tells
// it), with GSO on: the data comes in super-frames.
func TestBulkTransferFromHostGSO(t *testing.T) { bulkFromHost(t, true) }

func bulkFromHost(t *testing.T, gso bool) {
	ln, port := hostListener(t)
	const size = 16 << 20
	go serveZeros(ln, size)
	if !gso {
		t.Setenv(userproc.NoGSOEnv, "1")
	}
	b := open(t, Config{})
	if gso {
		if err := unix.Send(b.Fd(), []byte{userproc.OffloadMsg, 0x03}, 0); err != nil {
			t.Fatal(err)
		}
	}
	g := newTestGuestOpts(t, b, testMAC, maxVnetHdr, gso)
	c := g.dialGatewayWithin(t, port, 60*time.Second)
	defer c.Close()
	defer func() {
		if in := g.gsoIn.Load(); gso && in == 0 || !gso && in != 0 {
			t.Errorf("%d super-frames reached the guest (GSO %v)", in, gso)
		}
	}()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	start := time.Now()
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != size {
		t.Fatalf("guest received %d bytes (%v), want %d", n, err, size)
	}
	t.Logf("%d MiB in %v (%.0f MiB/s; both stacks are gVisor here)", size>>20, time.Since(start).Round(time.Millisecond), float64(size>>20)/time.Since(start).Seconds())
}
