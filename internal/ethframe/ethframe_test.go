package ethframe

import (
	"bytes"
	"net"
	"testing"
)

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	ipA  = net.IPv4(10, 0, 2, 15)
	ipB  = net.IPv4(10, 0, 2, 1)
)

func TestUDPRoundTrip(t *testing.T) {
	f := AppendUDP(nil, macB, macA, ipA, ipB, 1000, 2000, []byte("hi"))
	if len(f) != EthLen+IPv4Len+UDPLen+2 {
		t.Fatalf("frame of %d bytes", len(f))
	}
	if Checksum(f[EthLen:EthLen+IPv4Len]) != 0 {
		t.Error("bad IPv4 header checksum")
	}
	p, ok := Parse(f)
	if !ok || p.Proto != ProtoUDP || p.SrcPort != 1000 || p.DstPort != 2000 || string(p.Payload) != "hi" ||
		!p.SrcIP.Equal(ipA) || !p.DstIP.Equal(ipB) {
		t.Errorf("parsed %+v", p)
	}
}

func TestAnswersARPAndPing(t *testing.T) {
	// An ARP request from B for A.
	req := appendEth(nil, net.HardwareAddr{255, 255, 255, 255, 255, 255}, macB, EtherARP)
	req = append(req, 0, 1, 8, 0, 6, 4, 0, 1)
	req = append(append(append(append(req, macB...), ipB.To4()...), make([]byte, 6)...), ipA.To4()...)
	rep, ok := AppendReply(nil, req, macA, ipA)
	p, _ := Parse(rep)
	if !ok || p.ARPOp != arpReply || !bytes.Equal(p.Dst, macB) || !p.SrcIP.Equal(ipA) || !p.DstIP.Equal(ipB) {
		t.Errorf("arp reply %+v", p)
	}
	// An echo request from B to A.
	ping := appendEth(nil, macA, macB, EtherIPv4)
	ping = appendIPv4(ping, ProtoICMP, ipB, ipA, ICMPLen+4)
	icmp := []byte{8, 0, 0, 0, 0, 7, 0, 9, 1, 2, 3, 4}
	c := Checksum(icmp)
	icmp[2], icmp[3] = byte(c>>8), byte(c)
	ping = append(ping, icmp...)
	rep, ok = AppendReply(nil, ping, macA, ipA)
	p, _ = Parse(rep)
	if !ok || p.ICMPType != 0 || p.ICMPID != 7 || p.ICMPSeq != 9 || !bytes.Equal(p.Payload, []byte{1, 2, 3, 4}) {
		t.Errorf("echo reply %+v", p)
	}
	if Checksum(rep[EthLen+IPv4Len:]) != 0 {
		t.Error("bad ICMP checksum")
	}
	udp := AppendUDP(nil, macA, macB, ipB, ipA, 5555, EchoPort, []byte("seq"))
	rep2, ok := AppendReply(nil, udp, macA, ipA)
	if p, _ := Parse(rep2); !ok || p.DstPort != 5555 || p.SrcPort != EchoPort || string(p.Payload) != "seq" || !p.DstIP.Equal(ipB) {
		t.Errorf("udp echo %+v", p)
	}
	if _, ok := AppendReply(nil, rep, macA, ipA); ok {
		t.Error("answered an echo reply")
	}
	if _, ok := Parse(rep[:20]); ok {
		t.Error("parsed a truncated frame")
	}
}
