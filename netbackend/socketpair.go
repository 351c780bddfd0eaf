package netbackend

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// SocketPair is a Backend over a SOCK_SEQPACKET socketpair: each frame is
// one message, as on a tap. Tests and benchmarks hold the Peer end and
// play the host side of the link.
type SocketPair struct {
	fd   int
	Peer int // the other end, owned by the caller
	// SingleFrame makes the device move one frame per readv or writev, as
	// on a tap, instead of batches per recvmmsg and sendmmsg.
	SingleFrame bool

	mu        sync.Mutex
	offload   uint
	vnetHdrSz int
}

// NewSocketPair returns a backend and, in Peer, the end the test uses.
func NewSocketPair() (*SocketPair, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %v", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("socketpair: %v", err)
	}
	return &SocketPair{fd: fds[0], Peer: fds[1]}, nil
}

// Name implements virtionet.Backend.
func (s *SocketPair) Name() string { return "socketpair" }

// Fd implements virtionet.Backend.
func (s *SocketPair) Fd() int { return s.fd }

// Offloads implements virtionet.Backend: a socketpair carries any frame.
func (s *SocketPair) Offloads() uint { return unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 }

// MultiFrame implements virtionet.MultiFramer.
func (s *SocketPair) MultiFrame() bool { return !s.SingleFrame }

// SetVnetHdrSize implements virtionet.Backend; it only records the size.
func (s *SocketPair) SetVnetHdrSize(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vnetHdrSz = n
	return nil
}

// SetOffload implements virtionet.Backend; it only records the flags.
func (s *SocketPair) SetOffload(flags uint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offload = flags
	return nil
}

// Settings returns the vnet header size and offloads last set.
func (s *SocketPair) Settings() (vnetHdrSize int, offload uint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vnetHdrSz, s.offload
}

// Close implements virtionet.Backend; it closes the device's end only.
func (s *SocketPair) Close() error {
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}
