package usernetd

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
	"tinyvmm/userproc"
)

// Linux's own stack as the guest: a tap in a namespace this test makes,
// with 10.0.2.15/24, bridged to the Backend frame by frame with their
// 12-byte vnet headers, as the device passes them. The kernel takes the
// gateway's GSO super-frames (NEEDS_CSUM, TCPV4) through the same
// virtio_net_hdr parsing a virtio-net guest uses, and sends its own TSO
// frames to the gateway; 16 MiB each way must arrive whole, and
// super-frames must have crossed both ways. Without offloads (the link as
// it was) and without GSO towards the guest, the same must arrive with no
// super-frame that way; each logs its rates, a device-level comparison
// with a Linux guest stack.
func TestLinuxKernelAcrossTheLink(t *testing.T) {
	for _, tc := range []struct {
		name     string
		offloads byte
		noGSO    bool
	}{{"tso+gso", userproc.Offloads, false}, {"tso", userproc.Offloads, true}, {"none", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noGSO {
				t.Setenv(userproc.NoGSOEnv, "1")
			}
			kernelAcrossTheLink(t, tc.offloads, !tc.noGSO && tc.offloads != 0)
		})
	}
}

func kernelAcrossTheLink(t *testing.T, offloads byte, wantGSO bool) {
	ns, mac, tapFd := tapNS(t, "tvun0", GuestIP+"/24", offloads)
	ln, port := hostListener(t)
	const size = 16 << 20
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		if _, err := io.Copy(c, io.LimitReader(zeroReader{}, size)); err != nil {
			got <- -1
			return
		}
		c.(*net.TCPConn).CloseWrite()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()

	b := open(t, Config{MAC: mac})
	var toKernel, fromKernel superFrames // each way
	bridge(t, b, offloads,
		func(ctx context.Context) { pump(ctx, b.Fd(), tapFd, &toKernel) },
		func(ctx context.Context) { pump(ctx, tapFd, b.Fd(), &fromKernel) })

	c := dialFrom(t, ns, port)
	defer c.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, c) // host -> kernel, to the host's CloseWrite
	if err != nil || n != size {
		t.Fatalf("the kernel received %d bytes (%v), want %d", n, err, size)
	}
	h2g := time.Since(start)
	start = time.Now()
	if _, err := io.Copy(c, io.LimitReader(zeroReader{}, size)); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if n := <-got; n != size {
		t.Fatalf("the host received %d bytes, want %d", n, size)
	}
	g2h := time.Since(start)
	to, from := toKernel.n.Load(), fromKernel.n.Load()
	if wantGSO != (to > 0) || (offloads&0x02 != 0) != (from > 0) {
		t.Errorf("super-frames: %d to the kernel, %d from it; offloads %#x, GSO %v", to, from, offloads, wantGSO)
	}
	// The gateway's super-frames are as long as the kernel's own can be
	// (64 KiB, where a 32 KiB bound cut a bulk transfer into twice the
	// frames): a bulk transfer has filled one.
	if longest := toKernel.longest.Load(); wantGSO && longest <= 32<<10 {
		t.Errorf("the longest super-frame to the kernel was %d bytes, want more than 32 KiB", longest)
	}
	mibs := func(d time.Duration) float64 { return float64(size>>20) / d.Seconds() }
	t.Logf("host->kernel %.0f MiB/s, kernel->host %.0f MiB/s; super-frames %d to the kernel (longest %d bytes), %d from it", mibs(h2g), mibs(g2h), to, toKernel.longest.Load(), from)
	if tx := b.conn.tx; tx != nil && tx.calls.Load() > 0 {
		t.Logf("to the kernel: %d frames in %d sendmmsg calls (%.1f each)", tx.frames.Load(), tx.calls.Load(), float64(tx.frames.Load())/float64(tx.calls.Load()))
	}
}

// tapNS makes a namespace with the tap name at addr and opens the tap
// with offloads (see openTap) until the test ends; the fd closes before
// the namespace goes (cleanups run last first).
func tapNS(tb testing.TB, name, addr string, offloads byte) (ns *scratchns.NS, mac net.HardwareAddr, tapFd int) {
	tb.Helper()
	ns = netnstest.Setup(tb)
	mac, err := ns.AddTap(name, addr)
	if err != nil {
		tb.Fatal(err)
	}
	if err := ns.Do(func() (err error) { tapFd, err = openTap(name, offloads); return }); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(tapFd) })
	return ns, mac, tapFd
}

// bridge tells the gateway in band the offloads the guest takes, as the
// device does, and runs the pumps that carry frames between the Backend's
// link and the guest's tap until the test ends.
func bridge(t *testing.T, b *Backend, offloads byte, pumps ...func(ctx context.Context)) {
	t.Helper()
	if err := unix.Send(b.Fd(), []byte{userproc.OffloadMsg, offloads}, 0); err != nil {
		t.Fatal(err)
	}
	runPumps(t, pumps...)
}

// runPumps runs each pump until the test ends; they stop before the fds
// they use close if those closes were registered as cleanups earlier.
func runPumps(tb testing.TB, pumps ...func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range pumps {
		wg.Add(1)
		go func() { defer wg.Done(); p(ctx) }()
	}
	tb.Cleanup(func() { cancel(); wg.Wait() })
}

// dialFrom connects from inside ns, through the gateway, to the host's
// loopback port, with 90 s for the whole exchange.
func dialFrom(t testing.TB, ns *scratchns.NS, port string) net.Conn {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", GatewayIP+":"+port, 20*time.Second)
		return
	}); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(90 * time.Second))
	return c
}

// openTap attaches to the persistent tap name with 12-byte vnet headers
// and the given TUNSETOFFLOAD flags (what the kernel may send us),
// non-blocking.
func openTap(name string, offloads byte) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	for _, c := range []struct {
		req uintptr
		arg uintptr
	}{
		{unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))},
	} {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), c.req, c.arg); e != 0 {
			unix.Close(fd)
			return -1, e
		}
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, maxVnetHdr); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(offloads)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// superFrames counts the messages a pump passed whose vnet header
// announces GSO, and the longest of them.
type superFrames struct {
	n, longest atomic.Int64
}

// pump copies messages from one fd to the other until ctx ends, counting
// the super-frames.
func pump(ctx context.Context, from, to int, gso *superFrames) {
	buf := make([]byte, 70000)
	for ctx.Err() == nil {
		unix.Poll([]unix.PollFd{{Fd: int32(from), Events: unix.POLLIN}}, 20)
		n, err := unix.Read(from, buf)
		if err != nil || n <= maxVnetHdr {
			continue
		}
		if buf[1] != 0 {
			gso.n.Add(1)
			if l := int64(n - maxVnetHdr); l > gso.longest.Load() {
				gso.longest.Store(l) // one pump per counter: no race
			}
		}
		for ctx.Err() == nil {
			_, err := unix.Write(to, buf[:n])
			if !errors.Is(err, unix.EAGAIN) {
				break
			}
			unix.Poll([]unix.PollFd{{Fd: int32(to), Events: unix.POLLOUT}}, 20)
		}
	}
}
