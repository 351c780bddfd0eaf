package usernetd

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"tinyvmm/internal/ethframe"
)

// dhcpFrame is msg from ip:68 to dst:67 in a broadcast frame from the
// guest's MAC, behind a zero vnet header, as the device sends it.
func dhcpFrame(msg *dhcpv4.DHCPv4, ip, dst net.IP) []byte {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	return ethframe.AppendUDP(make([]byte, maxVnetHdr), bcast, testMAC, ip, dst, 68, 67, msg.ToBytes())
}

// dhcpAnswer is the next DHCP message the gateway sends the guest, with
// the frame's destination MAC and IP address.
func dhcpAnswer(t *testing.T, fd int) (*dhcpv4.DHCPv4, tcpip.LinkAddress, net.IP) {
	t.Helper()
	buf := make([]byte, 65536)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100)
		n, err := unix.Read(fd, buf)
		if err != nil || n < maxVnetHdr {
			continue
		}
		f, ok := ethframe.Parse(buf[maxVnetHdr:n])
		if !ok || f.EtherType != ethframe.EtherIPv4 || f.Proto != ethframe.ProtoUDP || f.SrcPort != 67 || f.DstPort != 68 {
			continue
		}
		m, err := dhcpv4.FromBytes(f.Payload)
		if err != nil {
			t.Fatalf("the gateway's DHCP answer does not parse: %v", err)
		}
		return m, tcpip.LinkAddress(f.Dst), f.DstIP
	}
	t.Fatal("no DHCP answer in 10 s")
	return nil, "", nil
}

// The guest's DHCP client gets GuestIP with the gateway as router and DNS
// server, the subnet's mask and the MTU, offered and acknowledged by
// broadcast while it has no address and by unicast once it renews; a
// request for another address is refused.
func TestDHCPLeasesTheGuestItsAddress(t *testing.T) {
	b := open(t, Config{MTU: 1400})
	gateway, guest := net.ParseIP(GatewayIP).To4(), net.ParseIP(GuestIP).To4()
	discover, err := dhcpv4.NewDiscovery(testMAC)
	if err != nil {
		t.Fatal(err)
	}
	sendFrame(t, b.Fd(), dhcpFrame(discover, net.IPv4zero, net.IPv4bcast))
	offer, mac, to := dhcpAnswer(t, b.Fd())
	if offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.Equal(guest) || offer.TransactionID != discover.TransactionID {
		t.Fatalf("offer: %s", offer.Summary())
	}
	if mac != header.EthernetBroadcastAddress || !to.Equal(net.IPv4bcast) {
		t.Errorf("the offer went to %v at %v, want broadcast", to, mac)
	}
	if r := offer.Router(); len(r) != 1 || !r[0].Equal(gateway) {
		t.Errorf("router %v", r)
	}
	if d := offer.DNS(); len(d) != 1 || !d[0].Equal(gateway) {
		t.Errorf("DNS %v", d)
	}
	if m := offer.SubnetMask(); net.IP(m).String() != "255.255.255.0" {
		t.Errorf("mask %v", net.IP(m))
	}
	if id := offer.ServerIdentifier(); !id.Equal(gateway) {
		t.Errorf("server identifier %v", id)
	}
	if mtu := offer.Options.Get(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || binary.BigEndian.Uint16(mtu) != 1400 {
		t.Errorf("MTU option %v, want 1400", mtu)
	}
	if lease := offer.IPAddressLeaseTime(0); lease != dhcpLease {
		t.Errorf("lease %v", lease)
	}

	request, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	sendFrame(t, b.Fd(), dhcpFrame(request, net.IPv4zero, net.IPv4bcast))
	if ack, _, _ := dhcpAnswer(t, b.Fd()); ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(guest) {
		t.Fatalf("answer to the request: %s", ack.Summary())
	}

	// Renewing: unicast from the guest's address, with it in ciaddr. The
	// gateway answers by unicast too, so it must know the guest's MAC,
	// which a guest's ARP for the gateway tells it.
	sendFrame(t, b.Fd(), arpRequest(testMAC, guest, GatewayIP))
	renew, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithClientIP(guest))
	if err != nil {
		t.Fatal(err)
	}
	renew.Options.Del(dhcpv4.OptionRequestedIPAddress)
	renew.Options.Del(dhcpv4.OptionServerIdentifier)
	sendFrame(t, b.Fd(), dhcpFrame(renew, guest, gateway))
	ack, _, to := dhcpAnswer(t, b.Fd())
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(guest) || !to.Equal(guest) {
		t.Fatalf("answer to the renewal, to %v: %s", to, ack.Summary())
	}

	other, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 2, 99))))
	if err != nil {
		t.Fatal(err)
	}
	sendFrame(t, b.Fd(), dhcpFrame(other, net.IPv4zero, net.IPv4bcast))
	if nak, _, _ := dhcpAnswer(t, b.Fd()); nak.MessageType() != dhcpv4.MessageTypeNak || !nak.YourIPAddr.IsUnspecified() {
		t.Fatalf("answer to a request for 10.0.2.99: %s", nak.Summary())
	}
}

// Whatever a guest sends to port 67, the answer (if any) is made without
// a panic, echoes the request's transaction, and leases nothing but
// GuestIP.
func FuzzDHCPReply(f *testing.F) {
	discover, _ := dhcpv4.NewDiscovery(testMAC)
	f.Add(discover.ToBytes())
	offer, _ := dhcpv4.NewReplyFromRequest(discover, dhcpv4.WithYourIP(net.ParseIP(GuestIP)))
	request, _ := dhcpv4.NewRequestFromOffer(offer)
	f.Add(request.ToBytes())
	other, _ := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 2, 99))))
	f.Add(other.ToBytes())
	_, subnet, _ := net.ParseCIDR(Subnet)
	guest := net.ParseIP(GuestIP).To4()
	f.Fuzz(func(t *testing.T, msg []byte) {
		req, err := dhcpv4.FromBytes(msg)
		if err != nil {
			return
		}
		r := dhcpReply(req, subnet.Mask, 1500)
		if r == nil {
			return
		}
		if r.TransactionID != req.TransactionID {
			t.Errorf("reply to transaction %v carries %v", req.TransactionID, r.TransactionID)
		}
		switch r.MessageType() {
		case dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck:
			if !r.YourIPAddr.Equal(guest) {
				t.Errorf("%v leases %v", r.MessageType(), r.YourIPAddr)
			}
		case dhcpv4.MessageTypeNak:
		default:
			t.Errorf("answered with %v", r.MessageType())
		}
		if _, err := dhcpv4.FromBytes(r.ToBytes()); err != nil {
			t.Errorf("the reply does not parse: %v", err)
		}
	})
}
