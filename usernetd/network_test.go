package usernetd

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// The gateway offers SACK in its SYN-ACK to a guest that asks for it:
// with drops on the link, that is the difference between recovering
// every lost segment in one round trip and one per round trip.
func TestGatewayOffersSACK(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	b := open(t, Config{})
	guest := tcpip.AddrFrom4Slice(net.ParseIP(GuestIP).To4())
	gw := tcpip.AddrFrom4Slice(net.ParseIP(GatewayIP).To4())
	// The gateway knows the guest's MAC already: no ARP to answer.
	if err := b.vn.stack.AddStaticNeighbor(nicID, ipv4.ProtocolNumber, guest, tcpip.LinkAddress(testMAC)); err != nil {
		t.Fatal(err)
	}
	gwMAC, _ := net.ParseMAC(gatewayMAC)
	opts := []byte{2, 4, 0x05, 0xb4, 4, 2, 1, 1} // MSS 1460, SACK permitted, padding
	frame := make([]byte, header.EthernetMinimumSize+header.IPv4MinimumSize+header.TCPMinimumSize+len(opts))
	header.Ethernet(frame).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(testMAC), DstAddr: tcpip.LinkAddress(gwMAC), Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(frame[header.EthernetMinimumSize:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: guest, DstAddr: gw})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(ip.Payload())
	tcp.Encode(&header.TCPFields{SrcPort: 40000, DstPort: uint16(ln.Addr().(*net.TCPAddr).Port), SeqNum: 1000,
		DataOffset: uint8(header.TCPMinimumSize + len(opts)), Flags: header.TCPFlagSyn, WindowSize: 65535})
	copy(tcp[header.TCPMinimumSize:], opts)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, guest, gw, uint16(len(tcp)))
	tcp.SetChecksum(^checksum.Checksum(tcp, xsum))
	sendFrame(t, b.Fd(), append(make([]byte, maxVnetHdr), frame...))

	buf := make([]byte, 65536)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		unix.Poll([]unix.PollFd{{Fd: int32(b.Fd()), Events: unix.POLLIN}}, 100)
		n, err := unix.Read(b.Fd(), buf)
		if err != nil || n < maxVnetHdr+header.EthernetMinimumSize+header.IPv4MinimumSize+header.TCPMinimumSize {
			continue
		}
		f := buf[maxVnetHdr:n]
		if header.Ethernet(f).Type() != header.IPv4ProtocolNumber {
			continue
		}
		rip := header.IPv4(f[header.EthernetMinimumSize:])
		if rip.Protocol() != uint8(header.TCPProtocolNumber) {
			continue
		}
		rt := header.TCP(rip.Payload())
		if rt.Flags() != header.TCPFlagSyn|header.TCPFlagAck {
			continue
		}
		if !header.ParseSynOptions(rt.Options(), true).SACKPermitted {
			t.Fatal("the gateway's SYN-ACK does not offer SACK")
		}
		return
	}
	t.Fatal("no SYN-ACK from the gateway in 20 s")
}

// arpRequest is a broadcast "who has target, tell ip at mac" behind a
// zero vnet header, as the device sends it.
func arpRequest(mac net.HardwareAddr, ip net.IP, target string) []byte {
	f := make([]byte, header.EthernetMinimumSize+header.ARPSize)
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(mac), DstAddr: header.EthernetBroadcastAddress, Type: header.ARPProtocolNumber})
	a := header.ARP(f[header.EthernetMinimumSize:])
	a.SetIPv4OverEthernet()
	a.SetOp(header.ARPRequest)
	copy(a.HardwareAddressSender(), mac)
	copy(a.ProtocolAddressSender(), ip.To4())
	copy(a.ProtocolAddressTarget(), net.ParseIP(target).To4())
	return append(make([]byte, maxVnetHdr), f...)
}

// The gateway answers ARP for its own address only: the stack would
// answer for any (it is the NAT), which would claim the guest's own
// address when it checks it is free.
func TestGatewayAnswersARPForItselfOnly(t *testing.T) {
	b := open(t, Config{})
	arp := func(target string) []byte { return arpRequest(testMAC, net.ParseIP(GuestIP), target) }
	sendFrame(t, b.Fd(), arp(GuestIP))     // the guest checking its own address
	sendFrame(t, b.Fd(), arp("10.0.2.77")) // a neighbour
	sendFrame(t, b.Fd(), arp(GatewayIP))
	buf := make([]byte, 65536)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		unix.Poll([]unix.PollFd{{Fd: int32(b.Fd()), Events: unix.POLLIN}}, 100)
		n, err := unix.Read(b.Fd(), buf)
		if err != nil || n < maxVnetHdr+header.EthernetMinimumSize+header.ARPSize {
			continue
		}
		f := buf[maxVnetHdr:n]
		if header.Ethernet(f).Type() != header.ARPProtocolNumber {
			continue
		}
		a := header.ARP(f[header.EthernetMinimumSize:])
		if a.Op() != header.ARPReply {
			continue
		}
		if who := net.IP(a.ProtocolAddressSender()).String(); who != GatewayIP {
			t.Fatalf("the gateway answered ARP for %s", who)
		}
		return // the replies come in order: none came for the others
	}
	t.Fatal("no ARP reply for the gateway in 20 s")
}

// The gateway's TCP connections, the NAT's among them, send from a
// buffer of sendBufSize: gVisor's default, 1 MiB, is all the data the
// stack holds unacknowledged and unsent, which bounded a transfer to the
// guest at 1 MiB per round trip of the link.
func TestGatewaySendBuffer(t *testing.T) {
	ln, port := hostListener(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	b := open(t, Config{})
	g := newTestGuest(t, b, testMAC)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := g.dialGateway(ctx, t, port)
	defer c.Close()
	var hc net.Conn
	select {
	case hc = <-accepted:
		defer hc.Close()
	case <-ctx.Done():
		t.Fatal("the host never saw the connection")
	}
	// A byte each way: the gateway's end is established.
	c.SetDeadline(time.Now().Add(20 * time.Second))
	hc.SetDeadline(time.Now().Add(20 * time.Second))
	one := make([]byte, 1)
	if _, err := c.Write(one); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(hc, one); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Write(one); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, one); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, te := range b.vn.stack.RegisteredEndpoints() {
		ep, ok := te.(*tcp.Endpoint)
		if !ok || tcp.EndpointState(ep.State()) != tcp.StateEstablished {
			continue
		}
		found++
		if got := ep.SocketOptions().GetSendBufferSize(); got != sendBufSize {
			t.Errorf("connection %+v: send buffer %d, want %d", ep.Info().(*stack.TransportEndpointInfo).ID, got, sendBufSize)
		}
	}
	if found == 0 {
		t.Fatal("no established connection in the gateway's stack")
	}
}
