// Package ethframe builds and answers the few Ethernet frames the device
// tests and benchmarks exchange with a kernel on the other side of a tap:
// IPv4/UDP, ARP and ICMP echo. No options, no fragments, no VLANs.
package ethframe

import (
	"encoding/binary"
	"net"
)

// Sizes and protocol numbers.
const (
	EthLen     = 14
	IPv4Len    = 20
	UDPLen     = 8
	ICMPLen    = 8
	arpLen     = 28
	EtherIPv4  = 0x0800
	EtherARP   = 0x0806
	ProtoICMP  = 1
	ProtoUDP   = 17
	arpRequest = 1
	arpReply   = 2
)

// AppendUDP appends an Ethernet/IPv4/UDP frame to b.
func AppendUDP(b []byte, dst, src net.HardwareAddr, srcIP, dstIP net.IP, sport, dport uint16, payload []byte) []byte {
	b = appendEth(b, dst, src, EtherIPv4)
	b = appendIPv4(b, ProtoUDP, srcIP, dstIP, UDPLen+len(payload))
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(UDPLen+len(payload)))
	b = append(b, 0, 0) // no UDP checksum (allowed over IPv4)
	b = append(b, payload...)
	return b
}

func appendEth(b []byte, dst, src net.HardwareAddr, typ uint16) []byte {
	b = append(b, dst[:6]...)
	b = append(b, src[:6]...)
	return binary.BigEndian.AppendUint16(b, typ)
}

func appendIPv4(b []byte, proto byte, src, dst net.IP, payloadLen int) []byte {
	h := len(b)
	b = append(b, 0x45, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(IPv4Len+payloadLen))
	b = append(b, 0, 0, 0x40, 0, 64, proto, 0, 0) // id 0, DF, ttl 64
	b = append(b, src.To4()...)
	b = append(b, dst.To4()...)
	binary.BigEndian.PutUint16(b[h+10:], Checksum(b[h:h+IPv4Len]))
	return b
}

// Checksum is the Internet checksum (RFC 1071).
func Checksum(b []byte) uint16 {
	var sum uint32
	for ; len(b) >= 2; b = b[2:] {
		sum += uint32(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// Frame is what Parse found in a frame.
type Frame struct {
	Dst, Src     net.HardwareAddr
	EtherType    uint16
	Proto        byte   // IPv4 protocol
	SrcIP, DstIP net.IP // IPv4, or ARP sender and target
	SrcPort      uint16 // UDP
	DstPort      uint16
	Payload      []byte // UDP payload, or ICMP data after id and seq
	ARPOp        uint16
	ICMPType     byte
	ICMPID       uint16
	ICMPSeq      uint16
}

// Parse decodes f; ok is false for frames too short for what they claim.
func Parse(f []byte) (p Frame, ok bool) {
	if len(f) < EthLen {
		return p, false
	}
	p.Dst, p.Src = net.HardwareAddr(f[0:6]), net.HardwareAddr(f[6:12])
	p.EtherType = binary.BigEndian.Uint16(f[12:])
	f = f[EthLen:]
	switch p.EtherType {
	case EtherARP:
		if len(f) < arpLen {
			return p, false
		}
		p.ARPOp = binary.BigEndian.Uint16(f[6:])
		p.SrcIP, p.DstIP = net.IP(f[14:18]), net.IP(f[24:28])
		return p, true
	case EtherIPv4:
		if len(f) < IPv4Len || f[0]>>4 != 4 {
			return p, false
		}
		ihl := int(f[0]&0xf) * 4
		total := int(binary.BigEndian.Uint16(f[2:]))
		if ihl < IPv4Len || total < ihl || total > len(f) {
			return p, false
		}
		p.Proto = f[9]
		p.SrcIP, p.DstIP = net.IP(f[12:16]), net.IP(f[16:20])
		l4 := f[ihl:total]
		switch p.Proto {
		case ProtoUDP:
			if len(l4) < UDPLen {
				return p, false
			}
			p.SrcPort, p.DstPort = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
			p.Payload = l4[UDPLen:]
		case ProtoICMP:
			if len(l4) < ICMPLen {
				return p, false
			}
			p.ICMPType = l4[0]
			p.ICMPID, p.ICMPSeq = binary.BigEndian.Uint16(l4[4:]), binary.BigEndian.Uint16(l4[6:])
			p.Payload = l4[ICMPLen:]
		}
		return p, true
	}
	return p, true
}

// EchoPort is the UDP echo port (RFC 862) that AppendReply answers.
const EchoPort = 7

// AppendReply appends to b the answer a host with mac and ip gives to f:
// an ARP reply to a request for ip, an ICMP echo reply to a request to ip,
// or the same payload back for a UDP datagram to ip's EchoPort. ok is false
// when f needs no answer.
func AppendReply(b []byte, f []byte, mac net.HardwareAddr, ip net.IP) (out []byte, ok bool) {
	p, valid := Parse(f)
	if !valid {
		return b, false
	}
	switch {
	case p.EtherType == EtherARP && p.ARPOp == arpRequest && p.DstIP.Equal(ip):
		b = appendEth(b, p.Src, mac, EtherARP)
		b = append(b, 0, 1, 8, 0, 6, 4, 0, arpReply)
		b = append(b, mac...)
		b = append(b, ip.To4()...)
		b = append(b, p.Src...)
		b = append(b, p.SrcIP...)
		return b, true
	case p.EtherType == EtherIPv4 && p.Proto == ProtoICMP && p.ICMPType == 8 && p.DstIP.Equal(ip):
		b = appendEth(b, p.Src, mac, EtherIPv4)
		b = appendIPv4(b, ProtoICMP, ip, p.SrcIP, ICMPLen+len(p.Payload))
		h := len(b)
		b = append(b, 0, 0, 0, 0)
		b = binary.BigEndian.AppendUint16(b, p.ICMPID)
		b = binary.BigEndian.AppendUint16(b, p.ICMPSeq)
		b = append(b, p.Payload...)
		binary.BigEndian.PutUint16(b[h+2:], Checksum(b[h:]))
		return b, true
	case p.EtherType == EtherIPv4 && p.Proto == ProtoUDP && p.DstPort == EchoPort && p.DstIP.Equal(ip):
		return AppendUDP(b, p.Src, mac, ip, p.SrcIP, EchoPort, p.SrcPort, p.Payload), true
	}
	return b, false
}
