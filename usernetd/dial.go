package usernetd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// DialEnv, in the VMM's environment (passed on to tinyvmm-usernet),
// makes the NAT dial with dialHost rather than net.Dial: the benchmark's
// A/B switch.
const DialEnv = "TINYVMM_USERNET_DIAL"

var natRawDial = os.Getenv(DialEnv) != ""

// natDialTimeout bounds the NAT's dial of a host that does not answer:
// about as long as Linux's own SYN retries (tcp_syn_retries 6, 127 s),
// which bounded net.Dial's, whatever the host's sysctl says. The dial
// holds one of the forwarder's in-flight slots meanwhile.
var natDialTimeout = 2 * time.Minute

// dialNAT opens the NAT's host end of a guest's connection to addr:port.
func dialNAT(addr tcpip.Address, port uint16) (*net.TCPConn, error) {
	if natRawDial {
		return dialHost(addr, port, natDialTimeout)
	}
	c, err := net.Dial("tcp", net.JoinHostPort(addr.String(), fmt.Sprint(port)))
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// dialHost connects a TCP socket to addr:port without waiting on Go's
// poller: a non-blocking connect(2), then poll(2) on the socket in the
// same goroutine, at most timeout. net.Dial parks the goroutine after
// connect's EINPROGRESS until some thread polls the network; in
// tinyvmm-usernet (one P, on one CPU in the nested L1) that came ~2 ms
// after the host's server had accepted. On loopback the connection is
// made by the time connect returns (the kernel handles the SYN-ACK as it
// releases the socket), so the first poll, which does not wait, finds it.
// A refusal is the connect's error (ECONNREFUSED), a host that does not
// answer ETIMEDOUT after timeout.
func dialHost(addr tcpip.Address, port uint16, timeout time.Duration) (*net.TCPConn, error) {
	deadline := time.Now().Add(timeout)
	var sa unsafe.Pointer
	var salen uintptr
	domain := unix.AF_INET
	switch addr.Len() {
	case 4:
		r := &unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: addr.As4()}
		putPort(unsafe.Pointer(&r.Port), port)
		sa, salen = unsafe.Pointer(r), unsafe.Sizeof(*r)
	case 16:
		domain = unix.AF_INET6
		r := &unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: addr.As16()}
		putPort(unsafe.Pointer(&r.Port), port)
		sa, salen = unsafe.Pointer(r), unsafe.Sizeof(*r)
	default:
		return nil, fmt.Errorf("dial %v: not an IP address", addr)
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	// The address is on the heap (it escapes through unsafe.Pointer),
	// where it does not move. A non-blocking connect does not block: raw,
	// as the NAT's other calls on its sockets (rawIO).
	_, e := rawSyscall6(unix.SYS_CONNECT, uintptr(fd), uintptr(sa), salen, 0, 0, 0)
	runtime.KeepAlive(sa)
	switch e {
	case 0, unix.EINPROGRESS, unix.EINTR: // EINTR: the connect goes on
	default:
		return nil, dialErr(addr, port, e)
	}
	if e != 0 {
		if err := waitWritable(fd, deadline); err != nil {
			return nil, dialErr(addr, port, err)
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return nil, dialErr(addr, port, err)
		}
		if soerr != 0 {
			return nil, dialErr(addr, port, unix.Errno(soerr))
		}
	}
	f := os.NewFile(uintptr(fd), "")
	ok = true                 // f owns fd
	c, err := net.FileConn(f) // a dup of fd, on Go's poller; TCP_NODELAY and keepalive as net.Dial sets them
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, isTCP := c.(*net.TCPConn)
	if !isTCP {
		c.Close()
		return nil, errors.New("dial: not a TCP connection")
	}
	return tc, nil
}

// waitWritable waits until the connecting fd is writable (connected or
// failed) or deadline passes (ETIMEDOUT). The first poll does not wait
// and is raw; a wait is an ordinary system call, so that Go's scheduler
// gives the thread's P to the stack's other goroutines meanwhile.
func waitWritable(fd int, deadline time.Time) error {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	r, e := rawSyscall6(unix.SYS_POLL, uintptr(unsafe.Pointer(&pfd[0])), 1, 0, 0, 0, 0)
	runtime.KeepAlive(pfd)
	if e == 0 && r > 0 {
		return nil
	}
	for {
		ms := time.Until(deadline).Milliseconds()
		if ms <= 0 {
			return unix.ETIMEDOUT
		}
		n, err := unix.Poll(pfd, int(min(ms, 1<<30)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

// putPort stores port at p in network byte order (a sockaddr's port).
func putPort(p unsafe.Pointer, port uint16) {
	b := (*[2]byte)(p)
	b[0], b[1] = byte(port>>8), byte(port)
}

func dialErr(addr tcpip.Address, port uint16, err error) error {
	if e, ok := err.(unix.Errno); ok {
		err = os.NewSyscallError("connect", e)
	}
	return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IP(addr.AsSlice()), Port: int(port)}, Err: err}
}
