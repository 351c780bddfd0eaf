package usernetd

import (
	"errors"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// dhcpLease is how long the guest's address is leased for; the guest
// renews it at half that, by unicast, and gets the same address again.
const dhcpLease = time.Hour

// dhcpMaxMessage bounds one DHCP message; a longer datagram is cut short,
// does not parse, and is ignored.
const dhcpMaxMessage = 4096

// serveDHCP answers the guest's DHCP on the gateway's port 67, as QEMU's
// user networking does: the guest's address (GuestIP) in the subnet, the
// gateway as its router and DNS server, and the link's MTU. The wire has
// one NIC and the filter passes only its MAC, so whoever asks is offered
// GuestIP; a request for any other address is refused (NAK), and the
// client starts over and is offered GuestIP.
func serveDHCP(s *stack.Stack, subnet *net.IPNet, mtu int) error {
	var wq waiter.Queue
	ep, terr := s.NewEndpoint(udp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return errors.New(terr.String())
	}
	ep.SocketOptions().SetBroadcast(true) // a client with no address yet is answered by broadcast
	if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Port: portDHCPServer}); terr != nil {
		ep.Close()
		return errors.New(terr.String())
	}
	go answerDHCP(gonet.NewUDPConn(&wq, ep), subnet.Mask, mtu)
	return nil
}

// answerDHCP answers each request that comes to conn until it is closed.
func answerDHCP(conn net.PacketConn, mask net.IPMask, mtu int) {
	buf := make([]byte, dhcpMaxMessage)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		peer, ok := from.(*net.UDPAddr)
		if err != nil || !ok {
			continue
		}
		reply := dhcpReply(req, mask, mtu)
		if reply == nil {
			continue
		}
		if peer.IP.IsUnspecified() {
			peer = &net.UDPAddr{IP: net.IPv4bcast, Port: peer.Port}
		}
		conn.WriteTo(reply.ToBytes(), peer)
	}
}

// dhcpReply is the gateway's answer to req: an offer to a discover, an
// ACK or a NAK to a request, nothing to anything else (a release, an
// inform, a request meant for another server).
func dhcpReply(req *dhcpv4.DHCPv4, mask net.IPMask, mtu int) *dhcpv4.DHCPv4 {
	gateway, guest := net.ParseIP(GatewayIP).To4(), net.ParseIP(GuestIP).To4()
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return nil
	}
	mods := []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptServerIdentifier(gateway))}
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer))
	case dhcpv4.MessageTypeRequest:
		if id := req.ServerIdentifier(); id != nil && !id.Equal(gateway) {
			return nil // the client took another server's offer
		}
		asked := req.RequestedIPAddress() // selecting or rebooting
		if asked == nil {
			asked = req.ClientIPAddr // renewing
		}
		if !asked.Equal(guest) {
			r, err := dhcpv4.NewReplyFromRequest(req, append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak))...)
			if err != nil {
				return nil
			}
			return r
		}
		mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))
	default:
		return nil
	}
	mods = append(mods,
		dhcpv4.WithYourIP(guest),
		dhcpv4.WithNetmask(mask),
		dhcpv4.WithRouter(gateway),
		dhcpv4.WithDNS(gateway),
		dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(dhcpLease)),
		dhcpv4.WithOption(dhcpv4.Option{Code: dhcpv4.OptionInterfaceMTU, Value: dhcpv4.Uint16(mtu)}),
	)
	r, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil
	}
	return r
}
