package usernetd

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// testGuest plays the guest and the virtio-net device at once: a second
// gVisor stack at GuestIP whose frames cross the Backend's fd with a vnet
// header in front, as the device's would.
type testGuest struct {
	s      *stack.Stack
	ep     *channel.Endpoint
	fd     int
	hdrLen int
	gsoIn  atomic.Int64 // super-frames received (vnet header gso_type set)
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newTestGuest(t *testing.T, b *Backend, mac net.HardwareAddr) *testGuest {
	t.Helper()
	return newTestGuestHdr(t, b, mac, maxVnetHdr)
}

// newTestGuestHdr is newTestGuest with hdrLen-byte vnet headers.
func newTestGuestHdr(t *testing.T, b *Backend, mac net.HardwareAddr, hdrLen int) *testGuest {
	return newTestGuestOpts(t, b, mac, hdrLen, false)
}

// newTestGuestOpts is newTestGuestHdr whose stack, with tso, sends as a
// Linux guest does on a NIC with TSO and checksum offload: TCP segments
// of up to 32 KiB, their checksums left partial.
func newTestGuestOpts(t *testing.T, b *Backend, mac net.HardwareAddr, hdrLen int, tso bool) *testGuest {
	t.Helper()
	g := &testGuest{fd: b.Fd(), hdrLen: hdrLen}
	g.ep = channel.New(256, 1500, tcpip.LinkAddress(mac))
	if tso {
		g.ep.SupportedGSOKind = stack.HostGSOSupported
		// Takes the gateway's super-frames with partial checksums too.
		g.ep.LinkEPCapabilities = stack.CapabilityTXChecksumOffload | stack.CapabilityRXChecksumOffload
	}
	g.s = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	if err := g.s.CreateNIC(1, ethernet.New(g.ep)); err != nil {
		t.Fatal(err)
	}
	addr := tcpip.AddrFrom4Slice(net.ParseIP(GuestIP).To4())
	if err := g.s.AddProtocolAddress(1, tcpip.ProtocolAddress{
		Protocol: ipv4.ProtocolNumber, AddressWithPrefix: addr.WithPrefix(),
	}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	_, subnet, _ := net.ParseCIDR(Subnet)
	sn, _ := tcpip.NewSubnet(tcpip.AddrFrom4Slice(subnet.IP.To4()), tcpip.MaskFromBytes(subnet.Mask))
	g.s.SetRouteTable([]tcpip.Route{{Destination: sn, NIC: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Add(2)
	go g.tx(ctx)
	go g.rx(ctx)
	t.Cleanup(g.close)
	return g
}

// tx sends each frame of the guest stack through the fd behind a zero
// vnet header, waiting while the socket is full.
func (g *testGuest) tx(ctx context.Context) {
	defer g.wg.Done()
	hdr := make([]byte, g.hdrLen)
	for {
		pkt := g.ep.ReadContext(ctx)
		if pkt == nil {
			return
		}
		frame := pkt.ToView().AsSlice()
		for {
			_, err := unix.SendmsgBuffers(g.fd, [][]byte{hdr, frame}, nil, nil, unix.MSG_DONTWAIT)
			if !errors.Is(err, unix.EAGAIN) || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		pkt.DecRef()
	}
}

// rx hands each frame from the fd to the guest stack without its header.
func (g *testGuest) rx(ctx context.Context) {
	defer g.wg.Done()
	hdr := make([]byte, g.hdrLen)
	buf := make([]byte, 65536)
	for ctx.Err() == nil {
		fds := []unix.PollFd{{Fd: int32(g.fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 20); n <= 0 {
			continue
		}
		n, _, _, _, err := unix.RecvmsgBuffers(g.fd, [][]byte{hdr, buf}, nil, unix.MSG_DONTWAIT)
		if err != nil || n <= g.hdrLen {
			continue
		}
		if g.hdrLen >= 2 && hdr[1] != 0 {
			g.gsoIn.Add(1)
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(buf[:n-g.hdrLen])})
		g.ep.InjectInbound(header.EthernetProtocolAll, pkt)
		pkt.DecRef()
	}
}

func (g *testGuest) close() {
	g.cancel()
	g.wg.Wait()
	g.s.Close()
	g.s.Wait()
}

func (g *testGuest) dial(ctx context.Context, addr string) (net.Conn, error) {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := net.LookupPort("tcp", port)
	return gonet.DialContextTCP(ctx, g.s, tcpip.FullAddress{
		NIC: 1, Addr: tcpip.AddrFrom4Slice(net.ParseIP(host).To4()), Port: uint16(p),
	}, ipv4.ProtocolNumber)
}

// dialGateway connects from the guest to the host's loopback port
// through the gateway.
func (g *testGuest) dialGateway(ctx context.Context, t *testing.T, port string) net.Conn {
	t.Helper()
	c, err := g.dial(ctx, GatewayIP+":"+port)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dialGatewayWithin is dialGateway bounded by d, for a test whose only
// use of a context is the dial.
func (g *testGuest) dialGatewayWithin(t *testing.T, port string, d time.Duration) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return g.dialGateway(ctx, t, port)
}

func (g *testGuest) listen(t *testing.T, port uint16) net.Listener {
	t.Helper()
	ln, err := gonet.ListenTCP(g.s, tcpip.FullAddress{
		NIC: 1, Addr: tcpip.AddrFrom4Slice(net.ParseIP(GuestIP).To4()), Port: port,
	}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
