package usernetd

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"

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
func tcpNAT(s *stack.Stack, nat map[tcpip.Address]tcpip.Address, natLock *sync.Mutex) *tcp.Forwarder {
	linkLocal := tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4([4]byte{169, 254}), PrefixLen: 16}.Subnet()
	return tcp.NewForwarder(s, 0, 10, func(r *tcp.ForwarderRequest) {
		addr := r.ID().LocalAddress
		gport := int(r.ID().RemotePort)
		trace(trNATReq, gport, 0)
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
		hc := host.(*net.TCPConn)
		lport := hc.LocalAddr().(*net.TCPAddr).Port
		trace(trNATDialed, gport, lport)
		var wq waiter.Queue
		ep, tcpErr := r.CreateEndpoint(&wq)
		r.Complete(false)
		if tcpErr != nil {
			host.Close()
			return
		}
		trace(trNATEndpoint, gport, 0)
		hc.SetKeepAlivePeriod(time.Minute) // as tcpproxy sets it
		hcc := hostConn(hc)
		if rc, ok := hcc.(*rawTCPConn); ok {
			rc.port = lport
		}
		splice(gonet.NewTCPConn(&wq, ep), hcc.(halfCloser), gport)
	})
}

// halfCloser is a connection whose directions close one by one.
type halfCloser interface {
	net.Conn
	CloseRead() error
	CloseWrite() error
}

// splice copies both ways between a, the guest's end, and b, the
// host's, until both directions end, passing each end of data on as a
// half close, then closes both. gport names the connection in the trace
// (TraceEnv).
func splice(a, b halfCloser, gport int) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(a, b, gport, trH2GRead) }()
	go func() { defer wg.Done(); pipe(b, a, gport, trG2HRead) }()
	wg.Wait()
	a.Close()
	b.Close()
	trace(trSpliceDone, gport, 0)
}

// Copy buffer sizes: a direction starts with copyBufMin and moves to
// copyBufMax once a read fills its buffer, so only a connection that has
// carried bulk data holds the big one.
const (
	copyBufMin = 32 << 10
	copyBufMax = 256 << 10
)

// copyBufs keeps the copies' buffers from one connection to the next, one
// pool per size. The runtime clears a buffer it makes: 32 KiB each way
// per connection, a sixth of the child's CPU per short connection
// (BenchmarkRoundTripThroughChild's profile). A reused buffer is not
// cleared, and a copy writes only what its last read put there.
var copyBufs = [2]sync.Pool{
	{New: func() any { b := make([]byte, copyBufMin); return &b }},
	{New: func() any { b := make([]byte, copyBufMax); return &b }},
}

func getCopyBuf(big bool) *[]byte {
	if big {
		return copyBufs[1].Get().(*[]byte)
	}
	return copyBufs[0].Get().(*[]byte)
}

func putCopyBuf(b *[]byte) {
	if len(*b) == copyBufMax {
		copyBufs[1].Put(b)
	} else {
		copyBufs[0].Put(b)
	}
}

// pipe copies src to dst until src ends or either fails, then closes
// dst's writing (the end of data, or of what got through) and src's
// reading, as tcpproxy's copy does.
// read is the direction's trace kind of a read (trH2GRead or trG2HRead);
// its write and half close are the two after it.
func pipe(dst, src halfCloser, gport int, read traceKind) {
	defer src.CloseRead()
	defer func() {
		dst.CloseWrite()
		trace(read+2, gport, 0)
	}()
	copyGrowing(dst, src, gport, read)
}

// copyGrowing is io.Copy with a buffer that grows from copyBufMin to
// copyBufMax once a read fills it (gport and read: the trace's): the gateway's stack makes a segment of
// each write into it, and a host socket takes each write in one call.
func copyGrowing(dst io.Writer, src io.Reader, gport int, read traceKind) (int64, error) {
	bp := getCopyBuf(false)
	defer func() { putCopyBuf(bp) }()
	buf := *bp
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			traceCopy(read, gport, k)
			w, werr := dst.Write(buf[:k])
			traceCopy(read+1, gport, w)
			n += int64(w)
			if werr != nil {
				return n, werr
			}
			if w < k {
				return n, io.ErrShortWrite
			}
			if k == len(buf) && len(buf) < copyBufMax {
				putCopyBuf(bp)
				bp = getCopyBuf(true)
				buf = *bp
			}
		}
		if err == io.EOF {
			traceCopy(read, gport, -1)
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// traceCopy notes a copy's event, if it is traced (k: not 0 or 1).
func traceCopy(k traceKind, gport, n int) {
	if k > 1 {
		trace(k, gport, n)
	}
}
