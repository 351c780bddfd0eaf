package usernetd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// sendFrame writes one message (vnet header and frame) on the device's
// end, waiting while the socket is full.
func sendFrame(t *testing.T, fd int, msg []byte) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := unix.Send(fd, msg, unix.MSG_DONTWAIT)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("send: %v", err)
		}
		unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, 100)
	}
}

// A guest sending from made-up source MACs must not teach the gateway
// any of them: such frames (here ARP requests for the gateway, each from
// another MAC and address) are dropped and counted before the stack sees
// them, and the NIC's own MAC still works.
func TestSpoofedSourceMACsAreDropped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	b := open(t, Config{})
	const flood = 2000
	for i := range flood {
		mac := net.HardwareAddr{0x02, 0x00, 0x5e, byte(i >> 16), byte(i >> 8), byte(i)}
		sendFrame(t, b.Fd(), arpRequest(mac, net.IPv4(10, 0, 2, byte(100+i%100)), GatewayIP))
	}
	g := newTestGuest(t, b, testMAC)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The link is read in order: once this answer is back, the flood
	// before it has been read.
	if body, err := get(ctx, g, "http://"+GatewayIP+":"+port+"/"); err != nil || body != "ok" {
		t.Fatalf("GET after the flood: %q, %v", body, err)
	}
	neigh, terr := b.vn.stack.Neighbors(nicID, ipv4.ProtocolNumber)
	if terr != nil {
		t.Fatal(terr)
	}
	for _, n := range neigh {
		if n.LinkAddr != tcpip.LinkAddress(testMAC) {
			t.Errorf("the gateway learned %v at %v", n.Addr, n.LinkAddr)
		}
	}
	if s := b.Spoofed(); s != flood {
		t.Errorf("Spoofed() = %d, want %d", s, flood)
	}
}

// With restrict the guest cannot reach the host's loopback through the
// gateway: its connection attempt is refused by the filter, and the
// host's server never sees a connection.
func TestRestrictKeepsGuestFromHost(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	b := open(t, Config{Restrict: true})
	g := newTestGuest(t, b, testMAC)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() {
		body, err := get(ctx, g, "http://"+GatewayIP+":"+port+"/")
		if err == nil {
			err = fmt.Errorf("got %q", body)
		}
		res <- err
	}()
	// Wait for the filter to have refused the connection's SYN (the
	// guest's stack sends it at once), then stop the guest's retries.
	for deadline := time.Now().Add(20 * time.Second); b.Refused() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no frame refused in 20 s")
		}
		select {
		case err := <-res:
			t.Fatalf("the guest's GET ended before any frame was refused: %v", err)
		default:
		}
	}
	cancel()
	if err := <-res; err != nil && strings.HasPrefix(err.Error(), "got ") {
		t.Fatalf("restricted guest reached the host: %v", err)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the host's server had %d connections from a restricted guest", n)
	}
}

// Restrict keeps what the guest needs: the gateway's DNS and the
// connections that come in through a hostfwd.
func TestRestrictKeepsDNSAndHostForward(t *testing.T) {
	b := open(t, Config{Restrict: true, Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 8080}}})
	g := newTestGuest(t, b, testMAC)
	ln := g.listen(t, 8080)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		in, _ := io.ReadAll(c)
		c.Write(append([]byte("guest got: "), in...))
	}()
	c, err := net.DialTimeout("tcp", b.Forwards()[0], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	msg := bytes.Repeat([]byte("restricted "), 4096)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, append([]byte("guest got: "), msg...)) {
		t.Fatalf("through the hostfwd: %d bytes, %v", len(got), err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc, err := g.dial(ctx, GatewayIP+":53")
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	dc.SetDeadline(time.Now().Add(20 * time.Second))
	q := new(dns.Msg)
	q.SetQuestion(HostName+".", dns.TypeA)
	conn := &dns.Conn{Conn: dc}
	if err := conn.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	r, err := conn.ReadMsg()
	if err != nil || len(r.Answer) != 1 {
		t.Fatalf("DNS answer %v, %v", r, err)
	}
	if n := b.Refused(); n != 0 {
		t.Errorf("%d frames refused", n)
	}
}

// frame builds an Ethernet frame from testMAC: IPv4 to dst with an L4
// header (ports and TCP flags) when proto is TCP or UDP.
func frame(proto byte, dst string, sport, dport uint16, tcpFlags byte, fragOff uint16) []byte {
	gw, _ := net.ParseMAC(gatewayMAC)
	f := append(append([]byte{}, gw...), testMAC...)
	f = append(f, 0x08, 0x00)
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[6:8], fragOff)
	ip[9] = proto
	copy(ip[12:16], net.ParseIP(GuestIP).To4())
	copy(ip[16:20], net.ParseIP(dst).To4())
	l4 := make([]byte, 20)
	binary.BigEndian.PutUint16(l4[0:2], sport)
	binary.BigEndian.PutUint16(l4[2:4], dport)
	l4[13] = tcpFlags
	return append(append(f, ip...), l4...)
}

func TestRestrictFilter(t *testing.T) {
	f := newGuestFilter(Config{MAC: testMAC, Restrict: true, Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 22}}})
	const syn, ack = tcpFlagSyn, tcpFlagAck
	arp := frame(0, GatewayIP, 0, 0, 0, 0)[:ethHeaderLen+28]
	arp[12], arp[13] = 0x08, 0x06
	ipv6 := frame(protoTCP, GatewayIP, 1, 2, 0, 0)
	ipv6[12], ipv6[13] = 0x86, 0xdd
	badIHL := frame(protoTCP, GatewayIP, 22, 1000, ack, 0)
	badIHL[ethHeaderLen] = 0x44
	longIHL := frame(protoTCP, GatewayIP, 22, 1000, ack, 0)
	longIHL[ethHeaderLen] = 0x4f // 60 bytes of IP header: past the frame
	spoofed := frame(protoUDP, GatewayIP, 68, 67, 0, 0)
	spoofed[11] ^= 1
	for _, tc := range []struct {
		name  string
		frame []byte
		ok    bool
	}{
		{"ARP", arp, true},
		{"DHCP discover", frame(protoUDP, "255.255.255.255", 68, 67, 0, 0), true},
		{"DNS over UDP to the gateway", frame(protoUDP, GatewayIP, 40000, 53, 0, 0), true},
		{"DNS over TCP to the gateway", frame(protoTCP, GatewayIP, 40000, 53, syn, 0), true},
		{"ping the gateway", frame(protoICMP, GatewayIP, 0, 0, 0, 0), true},
		{"a hostfwd connection's reply", frame(protoTCP, GatewayIP, 22, 45000, syn|ack, 0), true},
		{"a hostfwd connection's data", frame(protoTCP, GatewayIP, 22, 45000, ack, 0), true},
		{"a new connection from the hostfwd port", frame(protoTCP, GatewayIP, 22, 8000, syn, 0), false},
		{"a connection to the host's loopback", frame(protoTCP, GatewayIP, 40000, 8000, syn, 0), false},
		{"a connection beyond the host", frame(protoTCP, "192.0.2.1", 40000, 80, syn, 0), false},
		{"a hostfwd port's reply elsewhere", frame(protoTCP, "192.0.2.1", 22, 45000, ack, 0), false},
		{"UDP to the host's loopback", frame(protoUDP, GatewayIP, 40000, 5353, 0, 0), false},
		{"DNS to another server", frame(protoUDP, "192.0.2.1", 40000, 53, 0, 0), false},
		{"ping beyond the host", frame(protoICMP, "192.0.2.1", 0, 0, 0, 0), false},
		{"a first fragment", frame(protoUDP, GatewayIP, 40000, 53, 0, 0x2000), false},
		{"a later fragment", frame(protoUDP, GatewayIP, 40000, 53, 0, 0x0010), false},
		{"IPv6", ipv6, false},
		{"an IP header under 20 bytes", badIHL, false},
		{"an IP header past the frame", longIHL, false},
		{"a truncated TCP header", frame(protoTCP, GatewayIP, 22, 45000, ack, 0)[:ethHeaderLen+30], false},
		{"another source MAC", spoofed, false},
	} {
		if got := f.allow(tc.frame); got != tc.ok {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.ok)
		}
	}
	if f.spoofed.Load() != 1 {
		t.Errorf("spoofed %d, want 1", f.spoofed.Load())
	}
	open := newGuestFilter(Config{MAC: testMAC})
	for _, fr := range [][]byte{frame(protoTCP, GatewayIP, 40000, 8000, syn, 0), ipv6, frame(protoUDP, GatewayIP, 1, 2, 0, 0x2000)} {
		if !open.allow(fr) {
			t.Errorf("without restrict a frame from the NIC's MAC was dropped")
		}
	}
}
