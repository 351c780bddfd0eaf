package usernetd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/containers/gvisor-tap-vsock/pkg/services/dns"
	gvforwarder "github.com/containers/gvisor-tap-vsock/pkg/services/forwarder"
	"github.com/containers/gvisor-tap-vsock/pkg/types"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"tinyvmm/userproc"
)

// network is the gateway: a gVisor stack on the guest's wire (link), with
// gvisor-tap-vsock's DNS service and UDP NAT, this package's TCP NAT and
// DHCP server, and the TCP options a link to a real guest wants, which
// gvisor-tap-vsock's virtualnetwork.New leaves at gVisor's defaults:
//   - SACK: the device drops a frame the socketpair has no room for, and
//     without SACK the guest's TCP (and the gateway's) recovers one lost
//     segment per round trip, or waits for a retransmission timeout;
//   - receive buffer auto-tuning, so the window the gateway offers the
//     guest grows with the transfer instead of staying at its default;
//   - no RACK loss detection and so no tail loss probes: a probe goes out
//     when no ACK came for two round trips, and on this link an ACK is
//     late only when a process was not scheduled (the device's worker,
//     this one), never lost on the way; in a slow VM each late ACK cost a
//     spurious retransmission and the congestion window it cut. Losses
//     (a frame the device could not take) are still found by SACK and
//     duplicate ACKs, or the retransmission timer;
//   - no TIME_WAIT (timeWait).
type network struct {
	stack *stack.Stack
	link  *link
}

const nicID = 1

// sendBufSize is the send buffer of the gateway's TCP connections (the
// most Linux's autotuning gives one): all the data the stack holds, sent
// and not acknowledged or not sent yet. At gVisor's default, 1 MiB, a
// transfer to the guest stalled on it once a round trip of the link (the
// batcher, the socketpair, the device, the guest's ACK) held 1 MiB,
// though the guest's window was open much wider.
const sendBufSize = 4 << 20

// timeWait is how long the gateway's side of a connection it closed first
// stays in TIME_WAIT: not at all. gVisor passes a new SYN for a 4-tuple
// in TIME_WAIT only to a listening endpoint, and the NAT's forwarder is
// none, so a guest that connected again from the same source port had
// its SYNs dropped for gVisor's 60 s; Linux guests pick source ports with
// random steps and do that within seconds at a few hundred connections a
// second (libslirp, like Linux, lets such a SYN open the new connection).
// TIME_WAIT keeps old duplicates out of a new connection, and a link
// between two stacks delivers in order; a final ACK the device dropped
// makes the guest resend its FIN, and the reset that answers it ends the
// guest's socket, already closed by its program.
const timeWait = 0

func newGateway(cfg *Config) (*network, error) {
	_, subnet, err := net.ParseCIDR(Subnet)
	if err != nil {
		return nil, err
	}
	mac, err := net.ParseMAC(gatewayMAC)
	if err != nil {
		return nil, err
	}
	gw := tcpip.AddrFrom4Slice(net.ParseIP(GatewayIP).To4())
	nic := &link{mac: tcpip.LinkAddress(mac), gateway: gw, gso: os.Getenv(userproc.NoGSOEnv) == ""}
	nic.mtu.Store(uint32(cfg.MTU))

	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
	})
	sack := tcpip.TCPSACKEnabled(true)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	sndBuf := tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: sendBufSize, Max: sendBufSize}
	noRACK := tcpip.TCPRecovery(0)
	tw := tcpip.TCPTimeWaitTimeoutOption(timeWait)
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &moderate, &sndBuf, &noRACK, &tw} {
		if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, opt); err != nil {
			return nil, errors.New(err.String())
		}
	}
	if err := s.CreateNIC(nicID, nic); err != nil {
		return nil, errors.New(err.String())
	}
	if err := s.AddProtocolAddress(nicID, tcpip.ProtocolAddress{
		Protocol: ipv4.ProtocolNumber, AddressWithPrefix: gw.WithPrefix(),
	}, stack.AddressProperties{}); err != nil {
		return nil, errors.New(err.String())
	}
	// The gateway answers for every address: it is the NAT.
	s.SetSpoofing(nicID, true)
	s.SetPromiscuousMode(nicID, true)
	sn, err := tcpip.NewSubnet(tcpip.AddrFromSlice(subnet.IP.To4()), tcpip.MaskFromBytes(subnet.Mask))
	if err != nil {
		return nil, err
	}
	s.SetRouteTable([]tcpip.Route{{Destination: sn, NIC: nicID}})

	// Connections to the gateway's own address reach the host's loopback.
	nat := map[tcpip.Address]tcpip.Address{gw: tcpip.AddrFrom4Slice(net.ParseIP(hostLoop).To4())}
	var natLock sync.Mutex
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcpNAT(s, nat, &natLock).HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, gvforwarder.UDP(s, nat, &natLock, false).HandlePacket)

	at := tcpip.FullAddress{NIC: nicID, Addr: gw, Port: 53}
	udpConn, err := gonet.DialUDP(s, &at, nil, ipv4.ProtocolNumber)
	if err != nil {
		return nil, err
	}
	tcpLn, err := gonet.ListenTCP(s, at, ipv4.ProtocolNumber)
	if err != nil {
		return nil, err
	}
	dnsServer, err := dns.NewWithUpstreamResolver(udpConn, tcpLn, []types.Zone{{Name: dnsZone + ".", Records: []types.Record{
		{Name: "host", IP: net.ParseIP(GatewayIP)},
	}}}, dnsUpstream)
	if err != nil {
		return nil, err
	}
	go dnsServer.Serve()
	go dnsServer.ServeTCP()

	if err := serveDHCP(s, subnet, cfg.MTU); err != nil {
		return nil, err
	}
	return &network{stack: s, link: nic}, nil
}

// dialGuest opens a TCP connection from the gateway to addr in the
// virtual network.
func (n *network) dialGuest(ctx context.Context, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	ip := net.ParseIP(host).To4()
	if err != nil || ip == nil {
		return nil, fmt.Errorf("bad address %q", addr)
	}
	return gonet.DialContextTCP(ctx, n.stack, tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4Slice(ip), Port: uint16(p)}, ipv4.ProtocolNumber)
}
