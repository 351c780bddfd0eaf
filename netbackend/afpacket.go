package netbackend

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// AFPacket is a backend on a host interface through an AF_PACKET socket
// with PACKET_VNET_HDR: the guest sends and receives on that interface
// directly (use a veth or macvlan of its own, with GRO off: the socket has
// no TUNSETOFFLOAD, so no offloads are offered). Its advantage over a tap
// is recvmmsg and sendmmsg: one system call moves a whole batch.
type AFPacket struct {
	name string
	fd   int
}

// OpenAFPacket opens an AF_PACKET backend on the interface ifname.
func OpenAFPacket(ifname string) (*AFPacket, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("af_packet: no interface %s in this namespace", ifname)
	}
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("af_packet on %s: %v (needs CAP_NET_RAW)", ifname, err)
	}
	p := &AFPacket{name: ifname, fd: fd}
	opts := []struct {
		opt  int
		what string
	}{
		{unix.PACKET_VNET_HDR, "PACKET_VNET_HDR"},
		{unix.PACKET_IGNORE_OUTGOING, "PACKET_IGNORE_OUTGOING"},
		{unix.PACKET_QDISC_BYPASS, "PACKET_QDISC_BYPASS"},
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, o.opt, 1); err != nil {
			p.Close()
			return nil, fmt.Errorf("af_packet on %s: %s: %v", ifname, o.what, err)
		}
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20) // room for bursts; best effort
	mreq := &unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_PROMISC}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		p.Close()
		return nil, fmt.Errorf("af_packet on %s: promiscuous mode: %v", ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		p.Close()
		return nil, fmt.Errorf("af_packet on %s: bind: %v", ifname, err)
	}
	return p, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Name implements virtionet.Backend.
func (p *AFPacket) Name() string { return p.name }

// Fd implements virtionet.Backend.
func (p *AFPacket) Fd() int { return p.fd }

// Offloads implements virtionet.Backend: none.
func (p *AFPacket) Offloads() uint { return 0 }

// MultiFrame implements virtionet.MultiFramer.
func (p *AFPacket) MultiFrame() bool { return true }

// SetVnetHdrSize implements virtionet.Backend: 10 bytes always work, 12 (with
// num_buffers) needs PACKET_VNET_HDR_SZ, Linux 6.2 or later.
func (p *AFPacket) SetVnetHdrSize(n int) error {
	if err := unix.SetsockoptInt(p.fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR_SZ, n); err != nil {
		if n == 10 {
			return nil // PACKET_VNET_HDR's own size
		}
		return fmt.Errorf("af_packet on %s: a %d-byte vnet header needs Linux 6.2 or later (%v)", p.name, n, err)
	}
	return nil
}

// SetOffload implements virtionet.Backend: only "none" is possible.
func (p *AFPacket) SetOffload(flags uint) error {
	if flags != 0 {
		return errors.New("af_packet backend takes no offloads")
	}
	return nil
}

// Close implements virtionet.Backend.
func (p *AFPacket) Close() error {
	if p.fd < 0 {
		return nil
	}
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}
