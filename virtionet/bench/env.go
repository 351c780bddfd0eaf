package bench

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

// The addresses of the benchmark's link, as in scripts/netns.sh.
var (
	HostIP  = net.IPv4(10, 0, 2, 1)
	GuestIP = net.IPv4(10, 0, 2, 15)
	// otherMAC is nobody's: frames to it are dropped by the host kernel
	// at once, the cheapest sink (the seed 000 test dropped in vhost).
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
)

// Env is one device on a tap in a namespace of its own, with the Go
// driver as its guest.
type Env struct {
	NS      *netnstest.NS
	Dev     *virtionet.Device
	Guest   *guestdrv.Guest
	HostMAC net.HardwareAddr
}

// NewEnv creates the namespace and tap, the device with tuning, and the
// guest acking features (0: all offered).
func NewEnv(tuning virtionet.Tuning, features uint64) (*Env, error) {
	ns, err := netnstest.New("tvdev")
	if err != nil {
		return nil, err
	}
	e := &Env{NS: ns}
	if e.HostMAC, err = ns.AddTap("tap0", "10.0.2.1/24"); err != nil {
		e.Close()
		return nil, err
	}
	err = ns.Do(func() error {
		var err error
		e.Dev, err = virtionet.New(virtionet.Config{Tap: "tap0", Tuning: tuning})
		return err
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	if err := ns.AddNeighbor("tap0", GuestIP, e.Dev.MAC()); err != nil {
		e.Close()
		return nil, fmt.Errorf("static neighbor: %v", err)
	}
	if e.Guest, err = guestdrv.New(e.Dev, guestdrv.Options{Features: features, IP: GuestIP}); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
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

// PacketSocket opens a send-only AF_PACKET socket on the tap inside the
// namespace: what it sends goes straight to the device, past the host's IP
// stack.
func (e *Env) PacketSocket() (int, error) {
	var fd int
	err := e.NS.Do(func() error {
		var err error
		fd, err = packetSocket("tap0", false)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("packet socket in namespace: %v", err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
