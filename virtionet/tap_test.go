package virtionet_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
	"tinyvmm/internal/syncbuf"
	"tinyvmm/netbackend"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

var (
	hostIP  = net.IPv4(10, 0, 2, 1)
	guestIP = net.IPv4(10, 0, 2, 15)
)

// openInNS makes the device on tap inside ns, moving frames by io ("" is
// writev), and returns it with its notices.
func openInNS(t *testing.T, ns *scratchns.NS, tap string, io virtionet.IOMode) (*virtionet.Device, *syncbuf.Buffer) {
	t.Helper()
	return openInNSTuned(t, ns, tap, io, virtionet.DefaultTuning())
}

// openInNSTuned is openInNS with the worker's tuning.
func openInNSTuned(t *testing.T, ns *scratchns.NS, tap string, io virtionet.IOMode, tun virtionet.Tuning) (*virtionet.Device, *syncbuf.Buffer) {
	t.Helper()
	log := &syncbuf.Buffer{}
	var dev *virtionet.Device
	err := ns.Do(func() error {
		var err error
		dev, err = openTap(virtionet.Config{Ifname: tap, Tuning: tun, IO: io,
			Log: func(f string, a ...any) { fmt.Fprintf(log, f+"\n", a...) }})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev, log
}

// openTap opens the tap cfg.Ifname (with cfg.Queues queues) as the VMM
// does and makes the device on it; the caller is in the tap's namespace.
func openTap(cfg virtionet.Config) (*virtionet.Device, error) {
	tap, err := netbackend.OpenTapQueues(cfg.Ifname, cfg.MTU, max(1, cfg.Queues))
	if err != nil {
		return nil, err
	}
	dev, err := virtionet.New(cfg, tap)
	if err != nil {
		tap.Close()
	}
	return dev, err
}

// deleteLink deletes the link name inside ns.
func deleteLink(t *testing.T, ns *scratchns.NS, name string) {
	t.Helper()
	if err := ns.Do(func() error {
		link, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkDel(link)
	}); err != nil {
		t.Fatal(err)
	}
}

// udpSocketIn binds a UDP socket to addr:port inside ns.
func udpSocketIn(t *testing.T, ns *scratchns.NS, port int) int {
	t.Helper()
	var fd int
	if err := ns.Do(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 1}, Port: port})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd
}

// The Go driver and a UDP socket on the host side of a tap exchange
// datagrams both ways; the kernel's ARP request for the guest is answered
// by the driver.
func TestTapExchangesFramesWithHostSocket(t *testing.T) {
	for _, tc := range []struct {
		name string
		feat uint64
	}{
		{"all offloads", 0},
		{"no offloads, no mergeable", virtionet.FeatVersion1 | virtionet.FeatMAC | virtionet.FeatEventIdx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netnstest.Setup(t)
			hostMAC, err := ns.AddTap("tap0", "10.0.2.1/24")
			if err != nil {
				t.Fatal(err)
			}
			dev, _ := openInNS(t, ns, "tap0", virtionet.IOWritev)
			if got := dev.Backend().(*netbackend.Tap).Opened(); got != "opened existing tap0" {
				t.Errorf("the tap says %q, not that it opened the existing tap", got)
			}
			if tc.feat == 0 && dev.Features()&(virtionet.FeatCsum|virtionet.FeatHostTSO4|virtionet.FeatGuestTSO6) == 0 {
				t.Errorf("tap offloads not offered: features %#x", dev.Features())
			}
			sock := udpSocketIn(t, ns, 9000)
			g, err := guestdrv.New(dev, guestdrv.Options{Features: tc.feat, IP: guestIP})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()

			out := ethframe.AppendUDP(nil, hostMAC, g.MAC, guestIP, hostIP, 4000, 9000, []byte("hello from the guest"))
			if err := g.Send(out, time.Second); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 2000)
			n, from, err := unix.Recvfrom(sock, buf, 0)
			if err != nil {
				t.Fatalf("host socket got nothing: %v\n%s", err, dev.Stats())
			}
			if string(buf[:n]) != "hello from the guest" {
				t.Fatalf("host got %q", buf[:n])
			}
			if err := unix.Sendto(sock, []byte("hello from the host"), 0, from); err != nil {
				t.Fatal(err)
			}
			got, err := g.Recv(3*time.Second, func(f []byte) bool {
				p, ok := ethframe.Parse(f)
				return ok && p.Proto == ethframe.ProtoUDP && p.DstPort == 4000
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, dev.Stats())
			}
			p, _ := ethframe.Parse(got)
			if !bytes.Equal(p.Payload, []byte("hello from the host")) || !p.SrcIP.Equal(hostIP) {
				t.Errorf("guest got %+v", p)
			}
			if g.Replies == 0 {
				t.Error("the kernel's ARP request was not answered")
			}
		})
	}
}

// The same exchange through the af_packet backend on one end of a veth
// pair whose other end has the host address.
func TestAFPacketExchangesFramesWithHostSocket(t *testing.T) {
	ns := netnstest.Setup(t)
	if err := ns.AddVeth("vh0", "vg0"); err != nil {
		t.Fatal(err)
	}
	if err := ns.AddAddr("vh0", "10.0.2.1/24"); err != nil {
		t.Fatal(err)
	}
	var hostMAC net.HardwareAddr
	var dev *virtionet.Device
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("vh0")
		if err != nil {
			return err
		}
		hostMAC = ifi.HardwareAddr
		p, err := netbackend.OpenAFPacket("vg0")
		if err != nil {
			return err
		}
		if dev, err = virtionet.New(virtionet.Config{AFPacket: "vg0", Tuning: virtionet.DefaultTuning()}, p); err != nil {
			p.Close()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if dev.Features()&(virtionet.FeatCsum|virtionet.FeatGuestCsum) != 0 {
		t.Errorf("af_packet offers checksum offloads: %#x", dev.Features())
	}
	sock := udpSocketIn(t, ns, 9000)
	g, err := guestdrv.New(dev, guestdrv.Options{IP: guestIP})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	out := ethframe.AppendUDP(nil, hostMAC, g.MAC, guestIP, hostIP, 4000, 9000, []byte("via af_packet"))
	if err := g.Send(out, time.Second); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2000)
	n, from, err := unix.Recvfrom(sock, buf, 0)
	if err != nil || string(buf[:n]) != "via af_packet" {
		t.Fatalf("host got %q, %v\n%s", buf[:n], err, dev.Stats())
	}
	if err := unix.Sendto(sock, []byte("back"), 0, from); err != nil {
		t.Fatal(err)
	}
	got, err := g.Recv(3*time.Second, func(f []byte) bool {
		p, ok := ethframe.Parse(f)
		return ok && p.Proto == ethframe.ProtoUDP && p.DstPort == 4000
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, dev.Stats())
	}
	if p, _ := ethframe.Parse(got); string(p.Payload) != "back" {
		t.Errorf("guest got %+v", p)
	}
}

// Deleting the tap under a running device (its namespace goes away) stops
// rx quietly instead of spinning on a dead fd.
func TestTapDeletedUnderDevice(t *testing.T) {
	ns := netnstest.Setup(t)
	if _, err := ns.AddTap("tap0", "10.0.2.1/24"); err != nil {
		t.Fatal(err)
	}
	dev, _ := openInNS(t, ns, "tap0", virtionet.IOWritev)
	g, err := guestdrv.New(dev, guestdrv.Options{IP: guestIP})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	deleteLink(t, ns, "tap0")
	time.Sleep(20 * time.Millisecond)
	cpu := dev.Stats().WorkerCPUNs
	time.Sleep(100 * time.Millisecond)
	if spent := dev.Stats().WorkerCPUNs - cpu; spent > uint64(20*time.Millisecond) {
		t.Errorf("worker used %v of CPU in 100 ms on a deleted tap", time.Duration(spent))
	}
	// tx to a dead tap is a counted drop, not a hang.
	if err := g.Send(ethframe.AppendUDP(nil, g.MAC, g.MAC, guestIP, hostIP, 1, 2, nil), time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for dev.Stats().Queues[1].Drops[virtionet.DropTxWriteError.String()] == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if d := dev.Stats().Queues[1].Drops[virtionet.DropTxWriteError.String()]; d != 1 {
		t.Errorf("tap write errors %d, want 1", d)
	}
}
