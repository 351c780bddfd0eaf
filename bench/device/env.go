package device

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/scratchns"
	"tinyvmm/netbackend"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

// The addresses of the benchmark's link, as in scripts/netns.sh.
var (
	HostIP  = net.IPv4(10, 0, 2, 1)
	GuestIP = net.IPv4(10, 0, 2, 15)
	// otherMAC is nobody's: frames to it are dropped by the host kernel
	// at once, the cheapest sink (the kick threshold patch of experiment 000 was measured
	// with frames dropped in vhost).
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
)

// Env is one device in a namespace of its own, with the Go driver as its
// guest. Its backend is a tap "tap0", or with AFPacket an AF_PACKET socket
// on "vg0", one end of a veth pair whose other end "vh0" is the host's.
type Env struct {
	NS       *scratchns.NS
	Dev      *virtionet.Device
	Guest    *guestdrv.Guest
	HostMAC  net.HardwareAddr
	HostIf   string // the host side: "tap0" or "vh0"
	AFPacket bool
}

// NewEnv creates the namespace and tap, the device with tuning, and the
// guest acking features (0: all offered).
func NewEnv(tuning virtionet.Tuning, features uint64) (*Env, error) {
	return newEnv(false, tuning, features)
}

// NewAFPacketEnv is NewEnv with the af_packet backend on a veth pair.
func NewAFPacketEnv(tuning virtionet.Tuning, features uint64) (*Env, error) {
	return newEnv(true, tuning, features)
}

func newEnv(afPacket bool, tuning virtionet.Tuning, features uint64) (*Env, error) {
	return newEnvIO(afPacket, virtionet.IOWritev, tuning, features)
}

// newEnvIO is newEnv with the device's Config.IO. newEnv runs a tap
// with one writev per frame, what the seed experiments measured.
func newEnvIO(afPacket bool, io virtionet.IOMode, tuning virtionet.Tuning, features uint64) (*Env, error) {
	ns, err := scratchns.New("tvdev")
	if err != nil {
		return nil, err
	}
	e := &Env{NS: ns, HostIf: "tap0", AFPacket: afPacket}
	cfg := virtionet.Config{Ifname: "tap0", Tuning: tuning, IO: io}
	if afPacket {
		e.HostIf, cfg.AFPacket = "vh0", "vg0"
		err = ns.AddVeth("vh0", "vg0")
		if err == nil {
			err = ns.AddAddr("vh0", "10.0.2.1/24")
		}
		if err == nil {
			err = ns.Do(func() error {
				ifi, err := net.InterfaceByName("vh0")
				if err == nil {
					e.HostMAC = ifi.HardwareAddr
				}
				return err
			})
		}
	} else {
		e.HostMAC, err = ns.AddTap("tap0", "10.0.2.1/24")
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	err = ns.Do(func() error {
		var err error
		e.Dev, err = openDevice(cfg)
		return err
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	if err := ns.AddNeighbor(e.HostIf, GuestIP, e.Dev.MAC()); err != nil {
		e.Close()
		return nil, fmt.Errorf("static neighbor: %v", err)
	}
	if e.Guest, err = guestdrv.New(e.Dev, guestdrv.Options{Features: features, IP: GuestIP}); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// openDevice opens the tap cfg.Ifname (cfg.Queues queues), or the
// AF_PACKET socket on cfg.AFPacket, as the VMM does, and makes the device
// on it. The caller is in the backend's namespace.
func openDevice(cfg virtionet.Config) (*virtionet.Device, error) {
	var b virtionet.Backend
	var err error
	if cfg.AFPacket != "" {
		b, err = netbackend.OpenAFPacket(cfg.AFPacket)
	} else {
		b, err = netbackend.OpenTapQueues(cfg.Ifname, cfg.MTU, max(1, cfg.Queues))
	}
	if err != nil {
		return nil, err
	}
	dev, err := virtionet.New(cfg, b)
	if err != nil {
		b.Close()
	}
	return dev, err
}

// Close stops the guest and the device and deletes the namespace.
func (e *Env) Close() {
	if e.Guest != nil {
		e.Guest.Close()
	}
	if e.Dev != nil {
		e.Dev.Close()
	}
	e.NS.Close()
}

// UDPSocket opens a UDP socket inside the namespace bound to the host
// address and port, with a receive timeout.
func (e *Env) UDPSocket(port int, timeout time.Duration) (int, error) {
	var fd int
	err := e.NS.Do(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 1}, Port: port})
	})
	if err != nil {
		return -1, fmt.Errorf("udp socket in namespace: %v", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd, nil
}

// PacketSocket opens a send-only AF_PACKET socket on the host side of the
// link inside the namespace: what it sends goes straight to the device,
// past the host's IP stack.
func (e *Env) PacketSocket() (int, error) {
	var fd int
	err := e.NS.Do(func() error {
		var err error
		fd, err = packetSocket(e.HostIf, false)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("packet socket in namespace: %v", err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
