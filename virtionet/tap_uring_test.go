package virtionet_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/internal/netnstest"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

// A burst of datagrams from the guest reaches a host socket through a real
// tap with io=uring, in order, several frames per io_uring_enter, and a
// burst from the host reaches the guest; then the tap is deleted and every
// frame after is one counted drop.
func TestTapIOUring(t *testing.T) {
	ns := netnstest.Setup(t)
	hostMAC, err := ns.AddTap("tap0", "10.0.2.1/24")
	if err != nil {
		t.Fatal(err)
	}
	// No busy polling: after rx work (the namespace's own IPv6 frames to
	// the new tap) a polling worker could take the guest's frames one by
	// one as the driver queues them, before its one kick.
	tun := virtionet.DefaultTuning()
	tun.PollUs = 0
	dev, log := openInNSTuned(t, ns, "tap0", virtionet.IOUring, tun)
	if dev.IO() != virtionet.IOUring {
		t.Skipf("io_uring unavailable here: %s", strings.TrimSpace(log.String()))
	}
	sock := udpSocketIn(t, ns, 9000)
	// No GUEST_TSO: every rx buffer holds a whole frame, so rx reads
	// through the ring too.
	feat := uint64(virtionet.FeatVersion1 | virtionet.FeatMAC | virtionet.FeatEventIdx | virtionet.FeatMrgRxBuf)
	g, err := guestdrv.New(dev, guestdrv.Options{IP: guestIP, Features: feat})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const n = 32
	for i := 0; i < n; i++ {
		if !g.Queue(ethframe.AppendUDP(nil, hostMAC, g.MAC, guestIP, hostIP, 4000, 9000, []byte{byte(i)})) {
			t.Fatalf("tx ring full at %d", i)
		}
	}
	g.Kick()
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		k, _, err := unix.Recvfrom(sock, buf, 0)
		if err != nil || k != 1 || buf[0] != byte(i) {
			t.Fatalf("datagram %d: %v %v\n%s", i, buf[:k], err, dev.Stats())
		}
	}
	// The socket may have every datagram before the worker has counted
	// the send that carried them.
	for deadline := time.Now().Add(2 * time.Second); dev.Stats().Queues[1].Frames < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s := dev.Stats().Queues[1]; s.Syscalls == 0 || s.Frames < 2*s.Syscalls {
		t.Errorf("%d frames in %d system calls: not batched", s.Frames, s.Syscalls)
	}
	to := &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 15}, Port: 4000}
	for i := 0; i < n; i++ {
		if err := unix.Sendto(sock, []byte{byte(i)}, 0, to); err != nil {
			t.Fatal(err)
		}
	}
	var payloads []byte
	for deadline := time.Now().Add(3 * time.Second); len(payloads) < n && time.Now().Before(deadline); {
		g.Poll(func(f []byte) {
			if p, ok := ethframe.Parse(f); ok && p.Proto == ethframe.ProtoUDP && p.DstPort == 4000 && len(p.Payload) == 1 {
				payloads = append(payloads, p.Payload[0])
			}
		})
		g.Wait(10 * time.Millisecond)
	}
	for i := 0; i < n; i++ {
		if i >= len(payloads) || payloads[i] != byte(i) {
			t.Fatalf("datagrams to the guest: %v, want 0..%d in order\n%s", payloads, n-1, dev.Stats())
		}
	}
	if s := dev.Stats().Queues[0]; s.Frames < n || s.Drops != nil {
		t.Errorf("rx: %d frames, drops %v", s.Frames, s.Drops)
	}

	deleteLink(t, ns, "tap0")
	g.Wait(10 * time.Millisecond)
	for i := 0; i < 4; i++ {
		g.Queue(ethframe.AppendUDP(nil, hostMAC, g.MAC, guestIP, hostIP, 4000, 9000, nil))
	}
	g.Kick()
	writeErrors := func() uint64 { return dev.Stats().Queues[1].Drops[virtionet.DropTxWriteError.String()] }
	deadline := time.Now().Add(2 * time.Second)
	for writeErrors() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if d := writeErrors(); d != 4 || dev.IO() != virtionet.IOUring {
		t.Errorf("writes to a deleted tap: %d drops (want 4), io %s (want uring still)", d, dev.IO())
	}
}

// A frame longer than the guest's whole rx chains (the host raised the
// tap's MTU behind the device's back) is one counted drop, with io=uring
// and with one readv per frame, and the next frame lands intact. The
// overflow byte after each chain is what shows it: a tap read into too
// short a buffer returns the bytes it copied, not the frame's length.
func TestTapFrameLongerThanChainsIsDropped(t *testing.T) {
	for _, io := range []virtionet.IOMode{virtionet.IOUring, virtionet.IOWritev} {
		t.Run(string(io), func(t *testing.T) {
			ns := netnstest.Setup(t)
			hostMAC, err := ns.AddTap("tap0", "10.0.2.1/24")
			if err != nil {
				t.Fatal(err)
			}
			dev, log := openInNS(t, ns, "tap0", io)
			if dev.IO() != io {
				t.Skipf("io=%s unavailable here: %s", io, strings.TrimSpace(log.String()))
			}
			// No GUEST_TSO: a 2048-byte buffer holds any frame of the
			// device's MTU, so each chain is one whole buffer.
			feat := uint64(virtionet.FeatVersion1 | virtionet.FeatMAC | virtionet.FeatMrgRxBuf)
			g, err := guestdrv.New(dev, guestdrv.Options{IP: guestIP, Features: feat})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if err := ns.Do(func() error {
				link, err := netlink.LinkByName("tap0")
				if err != nil {
					return err
				}
				return netlink.LinkSetMTU(link, 4000)
			}); err != nil {
				t.Fatal(err)
			}
			// Whole Ethernet frames through a packet socket, so that the
			// host's IP stack cannot fragment the long one.
			var ifindex int
			var sock int
			if err := ns.Do(func() error {
				link, err := netlink.LinkByName("tap0")
				if err != nil {
					return err
				}
				ifindex = link.Attrs().Index
				sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(sock)
			to := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}
			for _, size := range []int{3000, 5} { // a 3042-byte frame, then a short one
				f := ethframe.AppendUDP(nil, g.MAC, hostMAC, hostIP, guestIP, 9000, 4000, bytes.Repeat([]byte{byte(size)}, size))
				if err := unix.Sendto(sock, f, 0, to); err != nil {
					t.Fatalf("send %d bytes: %v", len(f), err)
				}
			}
			var got []int
			for deadline := time.Now().Add(3 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
				g.Poll(func(f []byte) {
					if p, ok := ethframe.Parse(f); ok && p.Proto == ethframe.ProtoUDP && p.DstPort == 4000 {
						got = append(got, len(p.Payload))
						if !bytes.Equal(p.Payload, bytes.Repeat([]byte{byte(len(p.Payload))}, len(p.Payload))) {
							t.Errorf("payload of %d bytes damaged: %v", len(p.Payload), p.Payload)
						}
					}
				})
				g.Wait(10 * time.Millisecond)
			}
			if len(got) != 1 || got[0] != 5 {
				t.Fatalf("datagrams delivered: %v bytes, want only the 5-byte one\n%+v", got, dev.Stats())
			}
			if d := dev.Stats().Queues[0].Drops[virtionet.DropRxTooBig.String()]; d != 1 {
				t.Errorf("too-big drops %d, want 1\n%+v", d, dev.Stats())
			}
		})
	}
}
