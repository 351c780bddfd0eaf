package e2e

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"net"
)

// The benchmark frame, built the same way by the bench guest
// (guest/bench/frame.c) and by the host side here: Ethernet + IPv4 + UDP
// with a payload of
//
//	magic u32 | seq u64 | checksum u32 | fill (byte i = (seq + i) & 0xff)
//
// all little-endian. The checksum covers the payload with its own field
// zeroed, so either side detects corruption; seq shows loss and reorder.
const (
	frameMagic  = 0x424d5654 // "TVMB"
	frameHeader = 42         // Ethernet 14 + IPv4 20 + UDP 8
	payloadHdr  = 16
	// FrameMin and FrameMax bound a frame's length without FCS.
	FrameMin = 60
	FrameMax = 1514
	udpSrc   = 40000
	udpDst   = 9
)

// Addresses of the bench network, the defaults of the guest's command line.
var (
	GuestIP = net.IPv4(10, 0, 2, 15).To4()
	HostIP  = net.IPv4(10, 0, 2, 1).To4()
	// SinkMAC belongs to nobody: the host's stack drops the guest's flood
	// early, while an AF_PACKET sink on the tap still sees every frame.
	SinkMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// payloadSum is the payload checksum (guest/bench/frame.c payload_sum).
func payloadSum(p []byte) uint32 {
	n := uint32(len(p))
	h := uint32(0x811c9dc5) ^ n
	i := 0
	for ; i+4 <= len(p); i += 4 {
		w := binary.LittleEndian.Uint32(p[i:])
		if i == 12 {
			w = 0
		}
		h = bits.RotateLeft32(h, 5) ^ w
		h *= 0x01000193
	}
	var w uint32
	for k := 0; i+k < len(p); k++ {
		w |= uint32(p[i+k]) << (8 * k)
	}
	return bits.RotateLeft32(h, 5) ^ w
}

func ipChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// BuildFrame writes a bench frame of len(f) bytes carrying seq.
func BuildFrame(f []byte, seq uint64, srcMAC, dstMAC net.HardwareAddr, srcIP, dstIP net.IP) {
	payload := len(f) - frameHeader
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	binary.BigEndian.PutUint16(ip[4:], uint16(seq))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], srcIP.To4())
	copy(ip[16:20], dstIP.To4())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], udpSrc)
	binary.BigEndian.PutUint16(udp[2:], udpDst)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+payload))
	binary.BigEndian.PutUint16(udp[6:], 0)
	p := f[frameHeader:]
	binary.LittleEndian.PutUint32(p[0:], frameMagic)
	binary.LittleEndian.PutUint64(p[4:], seq)
	binary.LittleEndian.PutUint32(p[12:], 0)
	for i := payloadHdr; i < payload; i++ {
		p[i] = byte(seq + uint64(i))
	}
	binary.LittleEndian.PutUint32(p[12:], payloadSum(p))
}

var (
	errNotBench = errors.New("not a bench frame")
	errCorrupt  = errors.New("bench frame with a wrong checksum or length")
)

// CheckFrame returns the sequence number of a good bench frame,
// errNotBench for other traffic and errCorrupt for a damaged bench frame.
func CheckFrame(f []byte) (uint64, error) {
	if len(f) < frameHeader+payloadHdr || f[12] != 0x08 || f[13] != 0 || f[23] != 17 {
		return 0, errNotBench
	}
	p := f[frameHeader:]
	if binary.LittleEndian.Uint32(p) != frameMagic {
		return 0, errNotBench
	}
	udpLen := int(binary.BigEndian.Uint16(f[38:]))
	if udpLen < 8+payloadHdr || frameHeader-8+udpLen > len(f) {
		return 0, errCorrupt
	}
	p = p[:udpLen-8]
	if payloadSum(p) != binary.LittleEndian.Uint32(p[12:]) {
		return 0, errCorrupt
	}
	return binary.LittleEndian.Uint64(p[4:]), nil
}

// seqCounter counts good frames, loss (gaps in seq) and reorder.
type seqCounter struct {
	Good, Bad, Other, Lost, Reordered, Bytes uint64
	next                                     uint64
}

func (c *seqCounter) add(f []byte) {
	seq, err := CheckFrame(f)
	switch err {
	case errNotBench:
		c.Other++
		return
	case errCorrupt:
		c.Bad++
		return
	}
	c.Good++
	c.Bytes += uint64(len(f))
	switch {
	case seq > c.next:
		c.Lost += seq - c.next
		c.next = seq + 1
	case seq < c.next:
		c.Reordered++
	default:
		c.next = seq + 1
	}
}
