package virtionet

// Feature bits of virtio-net (virtio 1.2, 5.1.3) and of the ring (6).
const (
	FeatCsum         = 1 << 0  // device handles packets with partial checksum (guest tx)
	FeatGuestCsum    = 1 << 1  // driver handles packets with partial checksum (guest rx)
	FeatMTU          = 1 << 3  // config space mtu is valid
	FeatMAC          = 1 << 5  // config space mac is valid
	FeatGuestTSO4    = 1 << 7  // driver can receive TSOv4
	FeatGuestTSO6    = 1 << 8  // driver can receive TSOv6
	FeatHostTSO4     = 1 << 11 // device can receive TSOv4 (guest tx)
	FeatHostTSO6     = 1 << 12 // device can receive TSOv6 (guest tx)
	FeatMrgRxBuf     = 1 << 15 // driver can merge receive buffers
	FeatStatus       = 1 << 16 // config space status is valid
	FeatIndirectDesc = 1 << 28 // VIRTIO_F_INDIRECT_DESC
	FeatEventIdx     = 1 << 29 // VIRTIO_F_EVENT_IDX
	FeatVersion1     = 1 << 32 // VIRTIO_F_VERSION_1
)

// Offload flags of TUNSETOFFLOAD (linux/if_tun.h); x/sys/unix lacks them.
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
)

// baseFeatures are offered whatever the backend can do.
const baseFeatures = FeatMTU | FeatMAC | FeatStatus | FeatMrgRxBuf |
	FeatIndirectDesc | FeatEventIdx | FeatVersion1

// offeredFeatures adds the checksum and TSO features whose tap offload the
// backend accepted: a frame the tap cannot take must never be offered.
func offeredFeatures(tunOffloads uint) uint64 {
	f := uint64(baseFeatures)
	if tunOffloads&tunFCsum != 0 {
		f |= FeatCsum | FeatGuestCsum
		if tunOffloads&tunFTSO4 != 0 {
			f |= FeatHostTSO4 | FeatGuestTSO4
		}
		if tunOffloads&tunFTSO6 != 0 {
			f |= FeatHostTSO6 | FeatGuestTSO6
		}
	}
	return f
}

// tunOffloadsFor is what the tap may hand us on rx, given what the driver
// acked: partial checksums only if the guest takes them, TSO only with them.
func tunOffloadsFor(acked uint64) uint {
	if acked&FeatGuestCsum == 0 {
		return 0
	}
	o := uint(tunFCsum)
	if acked&FeatGuestTSO4 != 0 {
		o |= tunFTSO4
	}
	if acked&FeatGuestTSO6 != 0 {
		o |= tunFTSO6
	}
	return o
}

// vnetHdrLen is the size of struct virtio_net_hdr the driver uses: 12 bytes
// (with num_buffers) for VERSION_1 or MRG_RXBUF, 10 for a legacy driver.
func vnetHdrLen(acked uint64) int {
	if acked&(FeatVersion1|FeatMrgRxBuf) != 0 {
		return 12
	}
	return 10
}

// Frame size limits, for sizing rx buffers.
const (
	ethHeaderLen = 14
	vlanTagLen   = 4
	maxGSOFrame  = 65535 + ethHeaderLen + vlanTagLen // what a tap hands over with TSO on
)

// maxRxFrame is the largest frame (vnet header included) the backend can
// deliver with these acked features and this MTU.
func maxRxFrame(acked uint64, mtu int) int {
	hdr := vnetHdrLen(acked)
	if acked&(FeatGuestTSO4|FeatGuestTSO6) != 0 {
		return hdr + maxGSOFrame
	}
	return hdr + mtuFrame(mtu)
}

// mtuFrame is the largest frame without GSO (vnet header not counted):
// the MTU's payload behind an Ethernet header and a VLAN tag.
func mtuFrame(mtu int) int { return ethHeaderLen + vlanTagLen + mtu }
