// Package usernetd is the virtio-net backend of --net user: rootless
// user-mode networking in-process, a gVisor network stack playing the
// gateway with services from github.com/containers/gvisor-tap-vsock. The guest gets DHCP, DNS,
// NAT to the host's own connections and port forwards from host addresses
// into the guest; nothing needs root, a tap or a namespace.
//
// The device sees a plain Backend: its end of a SOCK_SEQPACKET socketpair,
// one frame per message behind the vnet header, as with a tap. The other
// end is the gateway's (frameConn, under its link endpoint), which takes
// the vnet header off and puts it on. Seqpacket rather than datagrams: a
// unix datagram socket queues at most net.unix.max_dgram_qlen (10)
// messages however big its buffer, so a burst would be dropped; a
// seqpacket one queues up to its buffer. A length-prefixed stream would
// need the device to frame and unframe. Neither virtionet nor vmm imports this
// package: tinyvmm-usernet (cmd/tinyvmm-usernet) runs it in a process of
// its own on an inherited socketpair end (Attach), which package userproc
// starts for the VMM.
package usernetd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"tinyvmm/userproc"
)

// The guest's network, as userproc lays it out (QEMU's -nic user layout).
const (
	Subnet     = userproc.Subnet
	GatewayIP  = userproc.GatewayIP
	GuestIP    = userproc.GuestIP
	HostName   = userproc.HostName
	dnsZone    = userproc.DNSZone
	gatewayMAC = "5a:94:ef:e4:0c:dd"
	hostLoop   = "127.0.0.1"
)

// sockBuf is the send buffer asked for on each end of the socketpair: room
// for a burst of full frames. Without privilege Linux caps it at
// net.core.wmem_max (twice 208 KiB by default); a full buffer drops the
// device's tx frame (as a tap's full queue does) and makes the gateway wait.
const sockBuf = 4 << 20

// Config is one user-mode network.
type Config = userproc.Config

// Forward is one hostfwd=tcp:HOSTADDR:HPORT-:GPORT.
type Forward = userproc.Forward

// Backend is the device's end of the link to the virtual network.
type Backend struct {
	fd     int
	hdrLen atomic.Int32
	conn   *frameConn
	vn     *network
	fwds   []*forwarder

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	done   chan struct{} // closed when the gateway has let go of the link
	err    error         // why it let go before Close, if it did
	errMu  sync.Mutex
}

// quietLogs silences logrus, gvisor-tap-vsock's logger: it reports each
// connection the guest makes that fails and the link's end at Close at
// error level, on stderr, which would interleave with the guest's output.
var quietLogs sync.Once

// Open starts a virtual network for one device.
func Open(cfg Config) (*Backend, error) {
	vn, err := newNetwork(&cfg)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("net user: socketpair: %v", err)
	}
	userproc.SetSendBuffer(fds[0], sockBuf)
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("net user: %v", err)
	}
	b, err := attach(vn, fds[1], fds[0], cfg)
	if err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	return b, nil
}

// Attach starts a virtual network on fd, the gateway's end of a
// SOCK_SEQPACKET socketpair whose other end a device in another process
// holds (tinyvmm-usernet's inherited LinkFd). The Backend takes fd; its
// Fd is -1. Done is closed when that end is closed (the VMM exited).
func Attach(fd int, cfg Config) (*Backend, error) {
	vn, err := newNetwork(&cfg)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return attach(vn, fd, -1, cfg)
}

// attach serves the gateway's link on linkFd (which it takes) and opens the
// forwards; devFd is the device's end if it is in this process, else -1.
func attach(vn *network, linkFd, devFd int, cfg Config) (*Backend, error) {
	userproc.SetSendBuffer(linkFd, sockBuf)
	uc, err := unixConn(linkFd)
	if err != nil {
		return nil, fmt.Errorf("net user: %v", err)
	}
	b := &Backend{fd: devFd, vn: vn, done: make(chan struct{})}
	b.hdrLen.Store(maxVnetHdr)
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("net user: %v", err)
	}
	b.conn = &frameConn{UnixConn: uc, hdrLen: &b.hdrLen, filter: newGuestFilter(cfg)}
	if os.Getenv(userproc.TxSingleEnv) == "" {
		b.conn.tx = newTxBatcher(rc)
	}
	vn.link.conn.Store(b.conn)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	for _, f := range cfg.Forwards {
		fw, err := listenForward(b, f)
		if err != nil {
			b.fd = -1 // the caller closes it
			close(b.done)
			b.Close()
			return nil, err
		}
		b.fwds = append(b.fwds, fw)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(b.done)
		if err := vn.link.serve(b.conn); err != nil && b.ctx.Err() == nil {
			b.errMu.Lock()
			b.err = err
			b.errMu.Unlock()
		}
	}()
	for _, fw := range b.fwds {
		fw.start()
	}
	return b, nil
}

// newNetwork is the gVisor gateway for cfg (its MTU defaulted in place).
func newNetwork(cfg *Config) (*network, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("net user: the guest's MAC %v is not 6 bytes", cfg.MAC)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	quietLogs.Do(func() { logrus.SetOutput(io.Discard) })
	n, err := newGateway(cfg)
	if err != nil {
		return nil, fmt.Errorf("net user: %v", err)
	}
	return n, nil
}

// unixConn makes fd (the gateway's end) a *net.UnixConn on Go's poller.
func unixConn(fd int) (*net.UnixConn, error) {
	f := fdFile(fd)
	defer f.Close() // FileConn holds a dup
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("socketpair end is not a unix socket")
	}
	return uc, nil
}

// Name implements virtionet.Backend.
func (b *Backend) Name() string { return "user" }

// Fd implements virtionet.Backend.
func (b *Backend) Fd() int { return b.fd }

// Offloads implements virtionet.Backend: checksum and IPv4 TSO from the
// guest (userproc.Offloads says why the stack takes them as they are).
func (b *Backend) Offloads() uint { return userproc.Offloads }

// MultiFrame implements virtionet.MultiFramer: the device moves batches
// of frames with sendmmsg and recvmmsg.
func (b *Backend) MultiFrame() bool { return true }

// SetVnetHdrSize implements virtionet.Backend: frameConn takes this many
// bytes off each frame from the device and puts as many zeros in front of
// each frame to it.
func (b *Backend) SetVnetHdrSize(n int) error {
	if n < 0 || n > maxVnetHdr {
		return fmt.Errorf("net user: vnet header of %d bytes", n)
	}
	b.hdrLen.Store(int32(n))
	return nil
}

// SetOffload implements virtionet.Backend: frames to the guest never use
// an offload, so any subset of what was offered will do.
func (b *Backend) SetOffload(flags uint) error {
	if flags&^userproc.Offloads != 0 {
		return fmt.Errorf("net user: offloads %#x were never offered", flags&^userproc.Offloads)
	}
	return nil
}

// Forwards returns the host address each hostfwd listens on, in order.
func (b *Backend) Forwards() []string {
	var out []string
	for _, fw := range b.fwds {
		out = append(out, fw.ln.Addr().String())
	}
	return out
}

// Dropped counts the guest's frames left out for being shorter than an
// Ethernet header.
func (b *Backend) Dropped() uint64 { return b.conn.dropped.Load() }

// Spoofed counts the guest's frames dropped for a source MAC other than
// the NIC's.
func (b *Backend) Spoofed() uint64 { return b.conn.filter.spoofed.Load() }

// Refused counts the guest's frames that restrict kept from the stack.
func (b *Backend) Refused() uint64 { return b.conn.filter.refused.Load() }

// Done is closed when the gateway has let go of the link: Close, or the
// device's end closed.
func (b *Backend) Done() <-chan struct{} { return b.done }

// Err is why the gateway let go of the link before Close, if it did.
func (b *Backend) Err() error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err
}

// Close stops the forwards and the link and waits for their goroutines.
// The gVisor stack's own services (DHCP, DNS) have no way to stop: their
// goroutines stay blocked on their closed network, a few per Backend.
func (b *Backend) Close() error {
	var err error
	b.once.Do(func() {
		b.cancel()
		for _, fw := range b.fwds {
			fw.close()
		}
		b.conn.Close() // ends the link's read
		if b.fd >= 0 {
			err = unix.Close(b.fd)
		}
		b.wg.Wait()
	})
	return err
}
