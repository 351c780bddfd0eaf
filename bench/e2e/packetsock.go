package e2e

import (
	"fmt"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// packetSocket is an AF_PACKET socket bound to one interface, moving frames
// in batches with recvmmsg/sendmmsg so the host side is not the bottleneck.
type packetSocket struct {
	fd      int
	ifindex int
	bufs    [][]byte
	iovs    []unix.Iovec
	names   []unix.RawSockaddrLinklayer
	msgs    []mmsghdr
}

// mmsghdr is struct mmsghdr (x/sys/unix has no recvmmsg/sendmmsg).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

const packetBatch = 64

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openPacketSocket opens the socket; call it inside the namespace. A
// socket opened with receive false sees no traffic (a pure sender).
func openPacketSocket(ifname string, receive bool) (*packetSocket, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	proto := uint16(0)
	if receive {
		proto = htons(unix.ETH_P_ALL)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w (run as root)", err)
	}
	s := &packetSocket{fd: fd, ifindex: ifi.Index}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bind AF_PACKET to %s: %w", ifname, err)
	}
	// Room for bursts; the counts come from PACKET_STATISTICS anyway.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	if !receive {
		// A sender skips the tap's qdisc, as pktgen does: the frames go
		// straight to the tap's xmit, so the harness takes less of the
		// CPU it shares with the VMM's device.
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	s.bufs = make([][]byte, packetBatch)
	s.iovs = make([]unix.Iovec, packetBatch)
	s.names = make([]unix.RawSockaddrLinklayer, packetBatch)
	s.msgs = make([]mmsghdr, packetBatch)
	for i := range s.bufs {
		s.bufs[i] = make([]byte, 2048)
		s.iovs[i].Base = &s.bufs[i][0]
		s.iovs[i].SetLen(len(s.bufs[i]))
		s.msgs[i].hdr.Iov = &s.iovs[i]
		s.msgs[i].hdr.SetIovlen(1)
	}
	return s, nil
}

func (s *packetSocket) Close() error { return unix.Close(s.fd) }

// recv returns up to packetBatch frames that arrived from the tap's other
// side (frames the host sends out are skipped); none after the 100 ms
// receive timeout.
func (s *packetSocket) recv() ([][]byte, error) {
	for i := range s.iovs {
		s.iovs[i].SetLen(len(s.bufs[i]))
		s.msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		s.msgs[i].hdr.Namelen = uint32(unsafe.Sizeof(s.names[i]))
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])),
		uintptr(len(s.msgs)), unix.MSG_WAITFORONE, 0, 0)
	if errno == unix.EAGAIN || errno == unix.EINTR {
		return nil, nil
	}
	if errno != 0 {
		return nil, fmt.Errorf("recvmmsg: %w", errno)
	}
	out := make([][]byte, 0, n)
	for i := 0; i < int(n); i++ {
		if s.names[i].Pkttype != unix.PACKET_OUTGOING {
			out = append(out, s.bufs[i][:s.msgs[i].len])
		}
	}
	return out, nil
}

// send writes frames (each at most 2048 bytes) with as few sendmmsg calls
// as it takes; it returns how many the kernel took.
func (s *packetSocket) send(frames [][]byte) (int, error) {
	defer func() { // back to the receive buffers
		for i := range s.iovs {
			s.iovs[i].Base = &s.bufs[i][0]
			s.msgs[i].hdr.Name, s.msgs[i].hdr.Namelen = nil, 0
		}
	}()
	for i := range s.msgs {
		s.msgs[i].hdr.Name, s.msgs[i].hdr.Namelen = nil, 0
	}
	sent := 0
	for sent < len(frames) {
		n := min(len(frames)-sent, packetBatch)
		for i := 0; i < n; i++ {
			f := frames[sent+i]
			s.iovs[i].Base = &f[0]
			s.iovs[i].SetLen(len(f))
		}
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.msgs[0])), uintptr(n), 0, 0, 0)
		if errno == unix.EINTR || errno == unix.ENOBUFS || errno == unix.EAGAIN {
			return sent, nil
		}
		if errno != 0 {
			return sent, fmt.Errorf("sendmmsg: %w", errno)
		}
		sent += int(r)
	}
	return sent, nil
}

// drops is how many frames the socket lost to a full receive queue.
func (s *packetSocket) drops() uint64 {
	st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0
	}
	return uint64(st.Drops)
}
