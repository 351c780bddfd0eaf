package usernetd

import (
	"encoding/binary"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// link is the gateway's NIC: a gVisor link endpoint on the guest's wire
// (frameConn). serve hands the stack every frame the guest sends to the
// gateway's MAC or to all; the stack's frames go straight to the device.
// Once the guest takes checksum offload and TSO (OffloadMsg) it declares
// host GSO: the stack then hands it TCP segments of up to gsoMaxSize with
// their checksums partial, and each goes to the guest as one frame with a
// vnet header saying so, as a tap with TSO would.
//
// It stands where gvisor-tap-vsock's switch and link endpoint stood. A
// wire with one NIC on it needs no switch (no MAC to learn, no other port
// to send to), and their package links in gopacket for a debug dump never
// turned on, whose package init was three quarters of tinyvmm-usernet's,
// paid at every start before the guest could boot.
type link struct {
	mac     tcpip.LinkAddress
	gateway tcpip.Address
	mtu     atomic.Uint32
	gso     bool // super-frames to a guest with TSO (not userproc.NoGSOEnv)
	conn    atomic.Pointer[frameConn]

	// dispatcher is the stack's NIC, set by CreateNIC before serve starts.
	dispatcher stack.NetworkDispatcher
}

// maxGuestFrame is the read buffer for one frame from the guest: a TSO
// super-frame is up to 64 KiB of IP packet behind its Ethernet header;
// a longer message is cut short and dropped (frameConn.Read).
const maxGuestFrame = 1 << 17

// serve reads the guest's frames from c until the read fails (io.EOF once
// the device's end is closed). A frame to any MAC but the gateway's or
// broadcast has nowhere to go on this wire and is dropped.
func (l *link) serve(c *frameConn) error {
	buf := make([]byte, maxGuestFrame)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		eth := header.Ethernet(buf[:n])
		if dst := eth.DestinationAddress(); dst != l.mac && dst != header.EthernetBroadcastAddress {
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
			Payload: buffer.MakeWithData(buf[header.EthernetMinimumSize:n]),
		})
		l.dispatcher.DeliverNetworkPacket(eth.Type(), pkt)
		pkt.DecRef()
	}
}

// The link endpoint's settings and life, as stack.LinkEndpoint has them.
func (l *link) MTU() uint32                             { return l.mtu.Load() }
func (l *link) SetMTU(mtu uint32)                       { l.mtu.Store(mtu) }
func (l *link) MaxHeaderLength() uint16                 { return header.EthernetMinimumSize }
func (l *link) LinkAddress() tcpip.LinkAddress          { return l.mac }
func (l *link) SetLinkAddress(tcpip.LinkAddress)        {} // the gateway's MAC is fixed
func (l *link) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }
func (l *link) Attach(d stack.NetworkDispatcher)        { l.dispatcher = d }
func (l *link) IsAttached() bool                        { return l.dispatcher != nil }
func (l *link) AddHeader(*stack.PacketBuffer)           {}
func (l *link) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (l *link) Wait()                                   {}
func (l *link) Close()                                  {}
func (l *link) SetOnCloseAction(func())                 {}

// Capabilities implements stack.LinkEndpoint: the stack resolves the
// guest's MAC by ARP and takes the guest's frames' checksums as verified
// (userproc.Offloads says why).
func (l *link) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityResolutionRequired | stack.CapabilityRXChecksumOffload
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
func (l *link) GSOMaxSize() uint32 { return gsoMaxSize }

// SupportedGSO implements stack.GSOEndpoint: host GSO when the guest
// takes checksum offload and TSO over IPv4. The stack asks when a
// connection starts, after the driver set the offloads.
func (l *link) SupportedGSO() stack.SupportedGSO {
	c := l.conn.Load()
	if !l.gso || c == nil || c.guestOffloads.Load()&0x03 != 0x03 {
		return stack.GSONotSupported
	}
	return stack.HostGSOSupported
}

// WritePackets implements stack.LinkEndpoint.
func (l *link) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	c := l.conn.Load()
	if c == nil {
		return 0, &tcpip.ErrClosedForSend{}
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

// write sends pkt to the guest as one frame behind its vnet header.
func (l *link) write(c *frameConn, pkt *stack.PacketBuffer) tcpip.Error {
	r := pkt.EgressRoute
	src := l.LinkAddress()
	if r.LocalLinkAddress != "" {
		src = r.LocalLinkAddress
	}
	if pkt.NetworkProtocolNumber == header.ARPProtocolNumber {
		// The stack answers ARP for every address (it is the NAT); a
		// reply about any but the gateway's own would claim the guest's
		// address, or a neighbour's.
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
