package usernetd

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/containers/gvisor-tap-vsock/pkg/tap"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// gsoLink is the gateway's link endpoint: gvisor-tap-vsock's, whose
// frames go through the switch (with userproc.NoGSOEnv), or one that
// sends straight to the link and, once the guest takes TSO, declares host
// GSO: the stack then hands it TCP segments of up to
// gsoMaxSize with their checksums partial, and each goes to the guest as
// one frame with a vnet header saying so, as a tap with TSO would.
type gsoLink struct {
	*tap.LinkEndpoint
	gateway tcpip.Address
	direct  bool
	conn    atomic.Pointer[frameConn]
}

// gsoMaxSize bounds a super-frame to the guest: the stack's segments are
// up to this less its header reserve (160 bytes), so a frame's IP packet
// stays within the 64 KiB a virtio-net guest's TSO takes. At 32 KiB (as
// gVisor's channel link has it) a bulk transfer went to the guest in twice
// the frames, each 32 KiB write from the host cut into two segments.
const gsoMaxSize = 1 << 16

// virtio_net_hdr's values.
const (
	vnetFlagNeedsCsum = 1
	vnetGSOTCPv4      = 1
)

// GSOMaxSize implements stack.GSOEndpoint.
func (l *gsoLink) GSOMaxSize() uint32 { return gsoMaxSize }

// SupportedGSO implements stack.GSOEndpoint: host GSO when the guest
// takes checksum offload and TSO over IPv4. The stack asks when a
// connection starts, after the driver set the offloads.
func (l *gsoLink) SupportedGSO() stack.SupportedGSO {
	c := l.conn.Load()
	if !l.direct || c == nil || c.guestOffloads.Load()&0x03 != 0x03 {
		return stack.GSONotSupported
	}
	return stack.HostGSOSupported
}

// WritePackets implements stack.LinkEndpoint.
func (l *gsoLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	c := l.conn.Load()
	if !l.direct || c == nil {
		return l.LinkEndpoint.WritePackets(pkts)
	}
	if c.tx != nil {
		// The burst goes to the device in one send, at its end.
		c.tx.hold()
		defer c.tx.release()
	}
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if err := l.write(c, pkt); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (l *gsoLink) write(c *frameConn, pkt *stack.PacketBuffer) tcpip.Error {
	r := pkt.EgressRoute
	src := l.LinkAddress()
	if r.LocalLinkAddress != "" {
		src = r.LocalLinkAddress
	}
	if pkt.NetworkProtocolNumber == header.ARPProtocolNumber {
		// The stack answers ARP for every address (it is the NAT); a
		// reply about any but the gateway's own would claim the guest's
		// address, or a neighbour's, as gvisor-tap-vsock's link knows.
		if a := header.ARP(pkt.NetworkHeader().Slice()); a.IsValid() && a.Op() == header.ARPReply &&
			tcpip.AddrFromSlice(a.ProtocolAddressSender()) != l.gateway {
			return nil
		}
	}
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{Type: pkt.NetworkProtocolNumber, SrcAddr: src, DstAddr: r.RemoteLinkAddress})
	var hdr [maxVnetHdr]byte
	h := hdr[:c.hdrLen.Load()]
	if g := pkt.GSOOptions; g.Type == stack.GSOTCPv4 && g.NeedsCsum && len(h) >= 10 {
		l3 := len(pkt.NetworkHeader().Slice())
		start := header.EthernetMinimumSize + l3
		h[0] = vnetFlagNeedsCsum
		binary.LittleEndian.PutUint16(h[6:8], uint16(start))
		binary.LittleEndian.PutUint16(h[8:10], g.CsumOffset)
		if pkt.Data().Size() > int(g.MSS) {
			h[1] = vnetGSOTCPv4
			binary.LittleEndian.PutUint16(h[2:4], uint16(start+len(pkt.TransportHeader().Slice())))
			binary.LittleEndian.PutUint16(h[4:6], g.MSS)
		}
	}
	// The packet's own slices, not a copy of them (ToView): the frame is
	// copied once, where it is queued or sent.
	if _, err := c.writeFrame(h, pkt.AsSlices()...); err != nil {
		return &tcpip.ErrClosedForSend{}
	}
	return nil
}
