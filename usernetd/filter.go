package usernetd

import (
	"encoding/binary"
	"net"
	"sync/atomic"
)

// guestFilter decides which of the guest's frames reach the stack.
//
// Every frame must come from the NIC's own MAC: the wire has one NIC, and
// a guest sending from made-up MACs would have the gateway learn each of
// them (ARP) as a neighbour and answer it.
//
// With restrict (QEMU's restrict=on), the guest may only reach what the
// gateway itself serves, DHCP and DNS, and answer the connections that
// come to it through the hostfwd ports; everything the stack would carry
// out to the host (a connection to 10.0.2.2:PORT, to any other address,
// UDP through the NAT) is dropped here, before the stack could dial it.
type guestFilter struct {
	mac      [6]byte
	restrict bool
	gateway  [4]byte
	fwdPorts map[uint16]bool // guest ports the hostfwds connect to

	spoofed atomic.Uint64 // frames from another source MAC
	refused atomic.Uint64 // frames restrict kept from the stack
}

func newGuestFilter(cfg Config) *guestFilter {
	f := &guestFilter{restrict: cfg.Restrict, fwdPorts: map[uint16]bool{}}
	copy(f.mac[:], cfg.MAC)
	copy(f.gateway[:], net.ParseIP(GatewayIP).To4())
	for _, fw := range cfg.Forwards {
		f.fwdPorts[fw.GuestPort] = true
	}
	return f
}

const (
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806

	protoICMP = 1
	protoTCP  = 6
	protoUDP  = 17

	tcpFlagSyn = 0x02
	tcpFlagAck = 0x10

	portDHCPServer = 67
	portDNS        = 53
)

// allow says whether frame (at least an Ethernet header long, no vnet
// header) may go on to the stack, and counts the ones that may not.
func (f *guestFilter) allow(frame []byte) bool {
	if [6]byte(frame[6:12]) != f.mac {
		f.spoofed.Add(1)
		return false
	}
	if !f.restrict || f.restricted(frame) {
		return true
	}
	f.refused.Add(1)
	return false
}

// restricted says whether restrict lets frame through: ARP; DHCP; DNS
// to the gateway; ICMP to the gateway (which answers it itself); TCP from
// a hostfwd's guest port to the gateway that is not a new connection.
// Fragments are refused: the ports of all but the first are unknown, and
// the stack would reassemble them into what the first did not show.
func (f *guestFilter) restricted(frame []byte) bool {
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case etherTypeARP:
		return true
	case etherTypeIPv4:
	default:
		return false
	}
	ip := frame[ethHeaderLen:]
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return false
	}
	ihl := int(ip[0]&0xf) * 4
	if ihl < 20 || len(ip) < ihl {
		return false
	}
	if binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // more fragments, or an offset
		return false
	}
	toGateway := [4]byte(ip[16:20]) == f.gateway
	l4 := ip[ihl:]
	switch ip[9] {
	case protoICMP:
		return toGateway
	case protoUDP:
		if len(l4) < 8 {
			return false
		}
		dport := binary.BigEndian.Uint16(l4[2:4])
		return dport == portDHCPServer || toGateway && dport == portDNS
	case protoTCP:
		if len(l4) < 20 || !toGateway {
			return false
		}
		sport, dport := binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		if dport == portDNS {
			return true
		}
		newConn := l4[13]&tcpFlagSyn != 0 && l4[13]&tcpFlagAck == 0
		return f.fwdPorts[sport] && !newConn
	}
	return false
}
