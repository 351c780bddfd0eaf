package e2e

import (
	"bytes"
	"encoding/binary"
	"net"
)

// echoReply answers an ARP request or ICMP echo request for ip, like the
// bench guest's echo mode (guest/bench/echo.c); nil for anything else.
func echoReply(f []byte, mac net.HardwareAddr, ip net.IP) []byte {
	if len(f) < 14 {
		return nil
	}
	ip4 := ip.To4()
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0806:
		a := f[14:]
		if len(a) < 28 || binary.BigEndian.Uint16(a[0:]) != 1 || binary.BigEndian.Uint16(a[2:]) != 0x0800 ||
			a[4] != 6 || a[5] != 4 || binary.BigEndian.Uint16(a[6:]) != 1 || !bytes.Equal(a[24:28], ip4) {
			return nil
		}
		out := make([]byte, 60)
		copy(out[0:6], f[6:12])
		copy(out[6:12], mac)
		out[12], out[13] = 0x08, 0x06
		r := out[14:]
		copy(r[0:6], a[0:6])
		r[6], r[7] = 0, 2
		copy(r[8:14], mac)
		copy(r[14:18], ip4)
		copy(r[18:28], a[8:18])
		return out
	case 0x0800:
		h := f[14:]
		if len(h) < 28 || h[0]>>4 != 4 || h[9] != 1 || !bytes.Equal(h[16:20], ip4) {
			return nil
		}
		ihl, total := int(h[0]&0xf)*4, int(binary.BigEndian.Uint16(h[2:]))
		if ihl < 20 || total < ihl+8 || total > len(h) || h[ihl] != 8 {
			return nil
		}
		out := make([]byte, max(14+total, 60))
		copy(out[0:6], f[6:12])
		copy(out[6:12], mac)
		copy(out[12:], f[12:14+total])
		r := out[14:]
		copy(r[12:16], ip4)
		copy(r[16:20], h[12:16])
		r[8] = 64
		r[10], r[11] = 0, 0
		binary.BigEndian.PutUint16(r[10:], ipChecksum(r[:ihl]))
		icmp := r[ihl:total]
		icmp[0], icmp[2], icmp[3] = 0, 0, 0
		binary.BigEndian.PutUint16(icmp[2:], ipChecksum(icmp))
		return out
	}
	return nil
}
