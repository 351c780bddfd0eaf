package virtionet

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Backend is where the device's frames go and come from. Each frame is one
// writev (tx) or one readv (rx) on Fd, vnet header first. The tap is the
// real implementation; tests use a SOCK_SEQPACKET socketpair.
type Backend interface {
	// Name identifies the backend in messages and stats ("tap0").
	Name() string
	// Fd is non-blocking and pollable with epoll.
	Fd() int
	// Offloads are the TUNSETOFFLOAD flags the backend accepts.
	Offloads() uint
	// SetVnetHdrSize sets the size of the vnet header in front of frames.
	SetVnetHdrSize(n int) error
	// SetOffload sets which offloaded frames the backend may hand over.
	SetOffload(flags uint) error
	Close() error
}

// MultiFramer is a Backend whose Fd takes recvmmsg(2) and sendmmsg(2) (a
// socket): rx then reads a whole batch of frames, each into its own
// pre-parsed guest chain, and tx sends a group of chains, with one system
// call each.
type MultiFramer interface {
	MultiFrame() bool
}

// mmsghdr is struct mmsghdr of recvmmsg(2) and sendmmsg(2), which x/sys/unix lacks.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// vectorCall makes one of the worker's vector system calls (readv, writev,
// recvmmsg, sendmmsg: fd, array, length, flags), retrying EINTR, which Go's
// preemption signals cause. The array stays an unsafe.Pointer until the
// call itself, so the garbage collector keeps track of it.
func vectorCall(trap uintptr, fd int, array unsafe.Pointer, n int, flags uintptr) (int, error) {
	for {
		r, _, e := unix.Syscall6(trap, uintptr(fd), uintptr(array), uintptr(n), flags, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// recvmmsg reads up to len(msgs) frames; it returns EAGAIN when none waits.
func recvmmsg(fd int, msgs []mmsghdr) (int, error) {
	return vectorCall(unix.SYS_RECVMMSG, fd, unsafe.Pointer(&msgs[0]), len(msgs), unix.MSG_DONTWAIT)
}

// sendmmsg sends msgs, returning how many went.
func sendmmsg(fd int, msgs []mmsghdr) (int, error) {
	return vectorCall(unix.SYS_SENDMMSG, fd, unsafe.Pointer(&msgs[0]), len(msgs), unix.MSG_DONTWAIT)
}

// readv reads one frame into iov; it returns EAGAIN when none is waiting.
func readv(fd int, iov []unix.Iovec) (int, error) {
	return vectorCall(unix.SYS_READV, fd, unsafe.Pointer(&iov[0]), len(iov), 0)
}

// writev writes one frame gathered from iov.
func writev(fd int, iov []unix.Iovec) (int, error) {
	return vectorCall(unix.SYS_WRITEV, fd, unsafe.Pointer(&iov[0]), len(iov), 0)
}
