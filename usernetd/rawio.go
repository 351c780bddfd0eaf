package usernetd

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GoSyscallsEnv, set in tinyvmm-usernet's environment, makes it do its
// socket I/O through Go's ordinary system calls rather than raw ones
// (rawIO): the benchmark's way to compare the two.
const GoSyscallsEnv = "TINYVMM_USERNET_GO_SYSCALLS"

// rawIO says whether the per-frame socket I/O (the link's reads and
// sends, the NAT's reads and writes of host sockets) makes its system
// calls raw: without telling Go's scheduler, which is right for calls
// that cannot block (every socket here is non-blocking; a call that
// would block returns EAGAIN and the goroutine waits on the poller as
// before). An ordinary call enters the scheduler's syscall state: its P
// may be taken by sysmon once the call has lasted a sysmon tick (20 us),
// and handed to another thread; the first call after the process idled
// wakes sysmon from its deep sleep. On a host with one CPU (the nested
// L1, where a system call that wakes another process lasts longer than a
// tick) each frame then woke two or three threads of the child where one
// would do: sysmon, and the threads the P went to and came back from.
var rawIO = os.Getenv(GoSyscallsEnv) == ""

// rawSyscall6 is a system call made raw or, without rawIO, as Go makes
// it. Its callers pass the addresses of their own stack variables (a
// msghdr, an iovec array) as uintptrs, which hold only while the stack
// does not move: nosplit, as the syscall package's functions it calls
// are, so that no stack growth copies the stack between the conversion
// and the kernel's use of the address.
//
//go:nosplit
//go:norace
func rawSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, unix.Errno) {
	var r uintptr
	var e syscall.Errno
	if rawIO {
		r, _, e = syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	} else {
		r, _, e = syscall.Syscall6(trap, a1, a2, a3, a4, a5, a6)
	}
	return r, unix.Errno(e)
}

// recvmsg reads one message into h and then b from the non-blocking fd:
// its length and flags (MSG_TRUNC), or EAGAIN.
func recvmsg(fd int, h, b []byte) (n, flags int, err error) {
	var iov [2]unix.Iovec
	var msg unix.Msghdr
	k := 0
	for _, p := range [][]byte{h, b} {
		if len(p) > 0 {
			iov[k].Base = unsafe.SliceData(p)
			iov[k].SetLen(len(p))
			k++
		}
	}
	if k > 0 {
		msg.Iov = &iov[0]
		msg.SetIovlen(k)
	}
	for {
		r, e := rawSyscall6(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT, 0, 0, 0)
		switch e {
		case 0:
			return int(r), int(msg.Flags), nil
		case unix.EINTR:
			continue
		}
		return 0, 0, e
	}
}

// sendmsg sends parts as one message on the non-blocking fd.
func sendmsg(fd int, parts [][]byte) (int, error) {
	iov := make([]unix.Iovec, 0, len(parts))
	for _, p := range parts {
		if len(p) > 0 {
			iov = append(iov, unix.Iovec{Base: unsafe.SliceData(p)})
			iov[len(iov)-1].SetLen(len(p))
		}
	}
	var msg unix.Msghdr
	if len(iov) > 0 {
		msg.Iov = &iov[0]
		msg.SetIovlen(len(iov))
	}
	for {
		r, e := rawSyscall6(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT, 0, 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// rawTCPConn is a host TCP connection whose reads and writes are raw
// system calls (rawIO) on its non-blocking socket, waiting on Go's
// poller as net.TCPConn does when the socket has nothing or no room;
// deadlines and Close end the waits as there.
type rawTCPConn struct {
	*net.TCPConn
	rc   syscall.RawConn
	port int // its local port, for the trace (TraceEnv)
}

// hostConn is c with raw reads and writes if it is a TCP connection and
// rawIO is on, else c.
func hostConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || !rawIO {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &rawTCPConn{TCPConn: tc, rc: rc}
}

// Read implements net.Conn.
func (c *rawTCPConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var e unix.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, errno := rawSyscall6(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
			if errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				trace(trHostSys, c.port, -int(errno))
			} else {
				trace(trHostSys, c.port, int(r))
			}
			n, e = int(r), errno
			return errno != unix.EAGAIN
		}
	})
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", e)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write implements net.Conn: all of b, or an error.
func (c *rawTCPConn) Write(b []byte) (int, error) {
	done := 0
	var e unix.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for done < len(b) {
			r, errno := rawSyscall6(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done), 0, 0, 0)
			switch errno {
			case 0:
				done += int(r)
				continue
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait for room, then go on
			}
			e = errno
			return true
		}
		return true
	})
	switch {
	case err != nil:
		return done, err
	case e != 0:
		return done, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", e)}
	}
	return done, nil
}
