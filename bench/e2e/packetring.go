package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// packetRing is the sink's AF_PACKET socket, receiving into a TPACKET_V3
// ring it shares with the kernel. The kernel copies each frame into the
// ring where the frame arrives (in the softirq of whoever sent it, for
// every system alike) and hands over whole blocks of frames, so the
// sink's thread makes about one system call per block and copies
// nothing. With recvmmsg the sink copied every frame on its own thread,
// which shares a CPU with the device it measures (--pin): in a nested L1
// it fell behind the faster devices and dropped most of their frames at
// its socket, and the tx cells measured the sink.
type packetRing struct {
	fd     int
	ring   []byte
	block  int  // the block the sink reads next
	held   bool // recv returned that block's frames; the next recv gives it back
	frames [][]byte
}

const (
	ringBlockSize = 1 << 20
	ringBlocks    = 32   // 32 MiB, what the socket's receive buffer was
	ringFrameSize = 2048 // a slot's bound on one frame with its headers (V3 packs frames tighter)
	ringRetireMs  = 10   // a block that does not fill goes to the sink after this
)

// Offsets into struct tpacket_block_desc and struct tpacket3_hdr
// (<linux/if_packet.h>); a frame's struct sockaddr_ll follows its header
// at TPACKET_ALIGN(sizeof(struct tpacket3_hdr)) = 48.
const (
	blockStatusOff  = 8  // hdr.bh1.block_status
	blockNumPktsOff = 12 // hdr.bh1.num_pkts
	blockFirstOff   = 16 // hdr.bh1.offset_to_first_pkt
	pktNextOff      = 0  // tp_next_offset
	pktSnaplenOff   = 12 // tp_snaplen
	pktMacOff       = 24 // tp_mac
	pktTypeOff      = 48 + 10
)

// openPacketRing opens the ring on ifname; call it inside the namespace.
func openPacketRing(ifname string) (*packetRing, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w (run as root)", err)
	}
	r := &packetRing{fd: fd}
	fail := func(what string, err error) (*packetRing, error) {
		r.Close()
		return nil, fmt.Errorf("packet ring on %s: %s: %w", ifname, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return fail("TPACKET_V3", err)
	}
	req := unix.TpacketReq3{
		Block_size: ringBlockSize, Block_nr: ringBlocks,
		Frame_size: ringFrameSize, Frame_nr: ringBlockSize / ringFrameSize * ringBlocks,
		Retire_blk_tov: ringRetireMs,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail("PACKET_RX_RING", err)
	}
	if r.ring, err = unix.Mmap(fd, 0, ringBlockSize*ringBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail("mmap", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return r, nil
}

// status is the block's status word, which the kernel and the sink hand
// the block over with.
func (r *packetRing) status(block int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.ring[block*ringBlockSize+blockStatusOff]))
}

// recv gives the block it returned last back to the kernel and returns the
// frames of the next one that arrived from the tap's other side; none
// after 100 ms without a block. The frames point into the ring: they are
// valid until the next recv.
func (r *packetRing) recv() ([][]byte, error) {
	if r.held {
		atomic.StoreUint32(r.status(r.block), unix.TP_STATUS_KERNEL)
		r.block, r.held = (r.block+1)%ringBlocks, false
	}
	if atomic.LoadUint32(r.status(r.block))&unix.TP_STATUS_USER == 0 {
		fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 100); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("poll packet ring: %w", err)
		}
		if atomic.LoadUint32(r.status(r.block))&unix.TP_STATUS_USER == 0 {
			return nil, nil
		}
	}
	r.held = true
	var err error
	r.frames, err = blockFrames(r.ring[r.block*ringBlockSize:][:ringBlockSize], r.frames[:0])
	return r.frames, err
}

// blockFrames appends to out the frames of one TPACKET_V3 block that came
// in from the interface's other side; the frames the host sent out on it
// are skipped, as recvmmsg's sink skipped them.
func blockFrames(block []byte, out [][]byte) ([][]byte, error) {
	le := binary.LittleEndian // the kernel's byte order; amd64 only here
	if len(block) < blockFirstOff+4 {
		return out, errors.New("packet ring: short block")
	}
	n, off := le.Uint32(block[blockNumPktsOff:]), int(le.Uint32(block[blockFirstOff:]))
	for i := uint32(0); i < n; i++ {
		if off < 0 || off+pktTypeOff+1 > len(block) {
			return out, fmt.Errorf("packet ring: frame %d of %d at %d, past the block", i, n, off)
		}
		h := block[off:]
		snap, mac := int(le.Uint32(h[pktSnaplenOff:])), int(le.Uint16(h[pktMacOff:]))
		if mac+snap > len(h) {
			return out, fmt.Errorf("packet ring: frame %d of %d (%d bytes at %d) past the block", i, n, snap, off+mac)
		}
		if h[pktTypeOff] != unix.PACKET_OUTGOING {
			out = append(out, h[mac:mac+snap])
		}
		next := int(le.Uint32(h[pktNextOff:]))
		if next <= 0 && i+1 < n {
			return out, fmt.Errorf("packet ring: frame %d of %d has no next", i, n)
		}
		off += next
	}
	return out, nil
}

// drops is how many frames the ring lost for want of a free block since
// the last call.
func (r *packetRing) drops() uint64 {
	st, err := unix.GetsockoptTpacketStatsV3(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0
	}
	return uint64(st.Drops)
}

func (r *packetRing) Close() error {
	if r.ring != nil {
		unix.Munmap(r.ring)
		r.ring = nil
	}
	return unix.Close(r.fd)
}
