package virtionet

import "encoding/binary"

// Layout of struct virtio_net_config (virtio 1.2, 5.1.4), little endian.
const (
	cfgMAC        = 0  // u8 mac[6]
	cfgStatus     = 6  // le16 status
	cfgMaxVQPairs = 8  // le16 max_virtqueue_pairs
	cfgMTU        = 10 // le16 mtu
	cfgSize       = 12
	statusLinkUp  = 1 // VIRTIO_NET_S_LINK_UP
)

// configSpace renders the device config space; it is read-only for the
// driver (the MAC is not writable without VIRTIO_NET_F_CTRL_MAC_ADDR).
func configSpace(mac []byte, mtu, pairs int) [cfgSize]byte {
	var b [cfgSize]byte
	copy(b[cfgMAC:], mac)
	binary.LittleEndian.PutUint16(b[cfgStatus:], statusLinkUp)
	binary.LittleEndian.PutUint16(b[cfgMaxVQPairs:], uint16(pairs))
	binary.LittleEndian.PutUint16(b[cfgMTU:], uint16(mtu))
	return b
}

// readConfig copies config bytes at offset into data; bytes past the end
// read as zero, as the spec asks for fields of features not offered.
func readConfig(cfg []byte, offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
		if off := offset + uint64(i); off >= offset && off < uint64(len(cfg)) {
			data[i] = cfg[off]
		}
	}
}
