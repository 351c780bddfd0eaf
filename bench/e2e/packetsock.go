package e2e

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// packetSocket is an AF_PACKET socket bound to one interface that sends
// frames in batches with sendmmsg, so the host side is not the
// bottleneck. It receives nothing (the sink reads a packetRing).
type packetSocket struct {
	fd   int
	iovs []unix.Iovec
	msgs []mmsghdr
}

// mmsghdr is struct mmsghdr (x/sys/unix has no sendmmsg).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

const packetBatch = 64

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openPacketSocket opens the socket; call it inside the namespace.
func openPacketSocket(ifname string) (*packetSocket, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	// Protocol 0: the socket is bound to no traffic, so it queues none.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w (run as root)", err)
	}
	s := &packetSocket{fd: fd}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bind AF_PACKET to %s: %w", ifname, err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
	// A sender skips the tap's qdisc, as pktgen does: the frames go
	// straight to the tap's xmit, so the harness takes less of the CPU it
	// shares with the VMM's device.
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	s.iovs = make([]unix.Iovec, packetBatch)
	s.msgs = make([]mmsghdr, packetBatch)
	for i := range s.msgs {
		s.msgs[i].hdr.Iov = &s.iovs[i]
		s.msgs[i].hdr.SetIovlen(1)
	}
	return s, nil
}

func (s *packetSocket) Close() error { return unix.Close(s.fd) }

// send writes frames (each at most 2048 bytes) with as few sendmmsg calls
// as it takes; it returns how many the kernel took.
func (s *packetSocket) send(frames [][]byte) (int, error) {
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
