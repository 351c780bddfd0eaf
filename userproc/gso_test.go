package userproc

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
)

// Through the real child and the link's control messages, as the device
// drives them at activation (SetVnetHdrSize, then SetOffload with what the
// guest took), a Linux stack playing the guest (a tap with 12-byte vnet
// headers in a namespace of the test's own) fetches 8 MiB from the host:
// once told the guest takes checksum offload and TSO the data comes in
// super-frames, each far longer than a segment; told it takes neither,
// in frames of one segment.
func TestChildSendsSuperFramesOnceTold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		offloads byte
	}{{"tso", Offloads}, {"none", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			frames, bytes, gso := fetchThroughChild(t, tc.offloads)
			avg := bytes / max(frames, 1)
			t.Logf("%d frames to the guest, %d with GSO, %d bytes each on average", frames, gso, avg)
			if tc.offloads != 0 && (gso == 0 || avg < 4<<10) {
				t.Errorf("told the guest takes TSO: %d super-frames, %d bytes a frame on average", gso, avg)
			}
			if tc.offloads == 0 && (gso != 0 || avg > 1514) {
				t.Errorf("told the guest takes no offload: %d super-frames, %d bytes a frame on average", gso, avg)
			}
		})
	}
}

// fetchThroughChild moves 8 MiB from a host socket to the guest's stack
// through a started child and counts the data frames that reached it.
func fetchThroughChild(t *testing.T, offloads byte) (frames, bytes, gso int64) {
	withChild(t)
	ns := netnstest.Setup(t)
	mac, err := ns.AddTap("tvgso0", GuestIP+"/24")
	if err != nil {
		t.Fatal(err)
	}
	var tapFd int
	if err := ns.Do(func() (err error) { tapFd, err = openVnetTap("tvgso0", offloads); return }); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tapFd)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 8 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, io.LimitReader(zeros{}, size))
	}()
	b, err := Start(Config{MAC: mac}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.SetVnetHdrSize(12); err != nil {
		t.Fatal(err)
	}
	if err := b.SetOffload(uint(offloads)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var toGuest, fromGuest frameCount
	wg.Add(2)
	go func() { defer wg.Done(); copyFrames(ctx, b.Fd(), tapFd, &toGuest) }()
	go func() { defer wg.Done(); copyFrames(ctx, tapFd, b.Fd(), &fromGuest) }()
	defer func() { cancel(); wg.Wait() }()
	var c net.Conn
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if err := ns.Do(func() (err error) { c, err = net.DialTimeout("tcp4", GatewayIP+":"+port, 20*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if n, err := io.Copy(io.Discard, c); err != nil || n != size {
		t.Fatalf("the guest received %d bytes (%v), want %d", n, err, size)
	}
	return toGuest.data.Load(), toGuest.bytes.Load(), toGuest.gso.Load()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// frameCount counts the data frames (longer than a bare ACK) one way, the
// bytes after their vnet headers, and those whose header announces GSO.
type frameCount struct{ data, bytes, gso atomic.Int64 }

// copyFrames copies messages from one fd to the other until ctx ends.
func copyFrames(ctx context.Context, from, to int, n *frameCount) {
	buf := make([]byte, 70000)
	for ctx.Err() == nil {
		unix.Poll([]unix.PollFd{{Fd: int32(from), Events: unix.POLLIN}}, 20)
		k, err := unix.Read(from, buf)
		if err != nil || k <= 12 {
			continue
		}
		if k > 12+100 {
			n.data.Add(1)
			n.bytes.Add(int64(k - 12))
			if buf[1] != 0 {
				n.gso.Add(1)
			}
		}
		for ctx.Err() == nil {
			if _, err := unix.Write(to, buf[:k]); !errors.Is(err, unix.EAGAIN) {
				break
			}
			unix.Poll([]unix.PollFd{{Fd: int32(to), Events: unix.POLLOUT}}, 20)
		}
	}
}

// openVnetTap attaches to the persistent tap name with 12-byte vnet
// headers and the TUNSETOFFLOAD flags given, non-blocking.
func openVnetTap(name string, offloads byte) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		unix.Close(fd)
		return -1, e
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, 12); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(offloads)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
