package usernetd

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// tcpNAT is the TCP half of the gateway's NAT: each connection the guest
// opens to an address beyond it is a connection the gateway opens from the
// host, spliced to it. It is gvisor-tap-vsock's forwarder.TCP (which
// refuses link-local addresses, cloud metadata among them, as this does)
// but for the copies: that one moves 32 KiB per call (io.Copy through
// tcpproxy), and the stack makes each write a segment of its own, which
// it sends as soon as the window lets it: a bulk transfer reached the
// guest in pieces no longer than a write, one system call on the host
// socket for each. Here a direction whose reads fill their buffer moves
// up to copyBufMax per call.
//
// The host's answers take the fewest turns of the link (natSplice).
func tcpNAT(s *stack.Stack, nat map[tcpip.Address]tcpip.Address, natLock *sync.Mutex, link *gsoLink) *tcp.Forwarder {
	linkLocal := tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4([4]byte{169, 254}), PrefixLen: 16}.Subnet()
	return tcp.NewForwarder(s, 0, 10, func(r *tcp.ForwarderRequest) {
		addr := r.ID().LocalAddress
		if linkLocal.Contains(addr) {
			r.Complete(true)
			return
		}
		natLock.Lock()
		if to, ok := nat[addr]; ok {
			addr = to
		}
		natLock.Unlock()
		host, err := net.Dial("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(r.ID().LocalPort))))
		if err != nil {
			r.Complete(true) // a reset, as the host's refusal
			return
		}
		var wq waiter.Queue
		ep, tcpErr := r.CreateEndpoint(&wq)
		r.Complete(false)
		if tcpErr != nil {
			host.Close()
			return
		}
		hc := host.(*net.TCPConn)
		hc.SetKeepAlivePeriod(time.Minute) // as tcpproxy sets it
		guest := gonet.NewTCPConn(&wq, ep)
		if eagerReads {
			if ns, err := newNATSplice(guest, ep, hc, link.burst); err == nil {
				ns.run()
				return
			}
		}
		splice(guest, hostConn(hc).(halfCloser))
	})
}

// eagerReads turns on natSplice's ways (OffEnv "read": splice's).
var eagerReads = !off("read")

// natSplice is splice for one connection of the NAT, with the host's
// answers read as soon as they can be, each with its end of data if that
// is there too, so that they take the fewest turns of the link (a turn: a
// send to the device, a wakeup of its worker, an interrupt of the guest;
// on one CPU each costs the guest's and the worker's time, however
// little it carries):
//   - after a short read of the host, one more read (non-blocking, as
//     all of them) looks for the end of data; where it is there, the
//     answer and the FIN go to the device in one send, in one turn, as
//     libslirp sends them, rather than the FIN a turn later;
//   - after each write to the host, the goroutine that wrote reads what
//     the host has answered: on one CPU a host server woken by the
//     write has often answered, and closed, before the write returns.
//     The answer then goes out at once, and its segment stands for the
//     ACK of the request, which waits in the link (txBatcher), where the
//     poller would have handed it to the other goroutine only later.
//
// One goroutine at a time reads the host and passes on what it read
// (mu): the reads stay in order.
type natSplice struct {
	guest *gonet.TCPConn
	ep    tcpip.Endpoint // guest's
	host  *net.TCPConn
	hostW net.Conn // host, its writes raw (hostConn)
	rc    syscall.RawConn
	burst func() (release func()) // holds the link's sends

	mu   sync.Mutex
	buf  []byte // what the host sent, n bytes of it
	n    int
	eof  bool // the host's end of data, or a failed read: passed on as a FIN
	done bool // the direction host -> guest has ended
}

func newNATSplice(guest *gonet.TCPConn, ep tcpip.Endpoint, host *net.TCPConn, burst func() func()) (*natSplice, error) {
	rc, err := host.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &natSplice{guest: guest, ep: ep, host: host, hostW: hostConn(host), rc: rc, burst: burst,
		buf: make([]byte, copyBufMin)}, nil
}

// run copies both ways until both directions end, then closes both.
func (s *natSplice) run() {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.hostToGuest() }()
	go func() { defer wg.Done(); s.guestToHost() }()
	wg.Wait()
	s.guest.Close()
	s.host.Close()
}

// hostToGuest waits for the host's data on the poller and passes it on,
// unless the other goroutine has taken it first, until the end of data.
func (s *natSplice) hostToGuest() {
	defer s.host.CloseRead()
	for {
		err := s.rc.Read(func(fd uintptr) bool {
			s.mu.Lock()
			if s.done || s.readLocked(fd) {
				return true // with mu held
			}
			s.mu.Unlock()
			return false
		})
		if err != nil {
			// Not read (the socket closed under the wait): the end,
			// as after a failed read.
			s.mu.Lock()
			s.eof = true
		}
		s.forwardLocked()
		done := s.done
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// guestToHost copies the guest's data to the host until the guest's end
// of data (passed on as a half close) or a failure, and after each write
// passes on what the host has answered already.
func (s *natSplice) guestToHost() {
	defer s.guest.CloseRead()
	defer s.host.CloseWrite()
	buf := make([]byte, copyBufMin)
	for {
		k, err := s.guest.Read(buf)
		if k > 0 {
			if _, werr := s.hostW.Write(buf[:k]); werr != nil {
				return
			}
			s.answer()
			if k == len(buf) && len(buf) < copyBufMax {
				buf = make([]byte, copyBufMax)
			}
		}
		if err != nil {
			return
		}
	}
}

// answer reads and passes on what the host has sent, if anything, unless
// the other goroutine is at it.
func (s *natSplice) answer() {
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if s.done {
		return
	}
	ready := false
	if err := s.rc.Control(func(fd uintptr) { ready = s.readLocked(fd) }); err != nil || !ready {
		return
	}
	s.forwardLocked()
}

// readLocked reads the host into buf; after a short read, it reads on
// while there is more, to the end of data if that is there. It says
// whether it has something to pass on: data, or the end (EOF or an
// error, which the old copies also passed on as the end of data).
func (s *natSplice) readLocked(fd uintptr) bool {
	for s.n < len(s.buf) {
		r, errno := rawSyscall6(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&s.buf[s.n])), uintptr(len(s.buf)-s.n), 0, 0, 0)
		switch {
		case errno == unix.EINTR:
			continue
		case errno == unix.EAGAIN:
			return s.n > 0
		case errno != 0 || r == 0:
			s.eof = true
			return true
		}
		s.n += int(r)
	}
	return true
}

// forwardLocked writes what readLocked read to the guest, and passes the
// end of data on after it, in one burst of the link where the data fits
// in the stack's send buffer at once: a write that waited for room there
// must not hold the link's sends, which bring the guest's ACKs that make
// the room.
func (s *natSplice) forwardLocked() {
	if s.done {
		return
	}
	data := s.buf[:s.n]
	if s.n == len(s.buf) && len(s.buf) < copyBufMax {
		defer func() { s.buf = make([]byte, copyBufMax) }()
	}
	s.n = 0
	release := func() {}
	if s.eof {
		release = s.burst()
		if len(data) > 0 {
			var r bytes.Reader
			r.Reset(data)
			if n, err := s.ep.Write(&r, tcpip.WriteOptions{}); err == nil {
				data = data[n:]
			}
		}
		if len(data) > 0 {
			release()
			release = func() {}
		}
	}
	if len(data) > 0 {
		if _, err := s.guest.Write(data); err != nil {
			s.eof = true
		}
	}
	if s.eof {
		s.guest.CloseWrite()
		s.done = true
	}
	release()
}

// halfCloser is a connection whose directions close one by one.
type halfCloser interface {
	net.Conn
	CloseRead() error
	CloseWrite() error
}

// splice copies both ways between a and b until both directions end,
// passing each end of data on as a half close, then closes both.
func splice(a, b halfCloser) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(a, b) }()
	go func() { defer wg.Done(); pipe(b, a) }()
	wg.Wait()
	a.Close()
	b.Close()
}

// Copy buffer sizes: a direction starts with copyBufMin and moves to
// copyBufMax once a read fills its buffer, so only a connection that has
// carried bulk data holds the big one.
const (
	copyBufMin = 32 << 10
	copyBufMax = 256 << 10
)

// pipe copies src to dst until src ends or either fails, then closes
// dst's writing (the end of data, or of what got through) and src's
// reading, as tcpproxy's copy does.
func pipe(dst, src halfCloser) {
	defer src.CloseRead()
	defer dst.CloseWrite()
	copyGrowing(dst, src)
}

// copyGrowing is io.Copy with a buffer that grows from copyBufMin to
// copyBufMax once a read fills it: the gateway's stack makes a segment of
// each write into it, and a host socket takes each write in one call.
func copyGrowing(dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, copyBufMin)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
			if w < k {
				return n, io.ErrShortWrite
			}
			if k == len(buf) && len(buf) < copyBufMax {
				buf = make([]byte, copyBufMax)
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
