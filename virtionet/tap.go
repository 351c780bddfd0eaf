package virtionet

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Tap is a Linux tap interface opened with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR.
type Tap struct {
	name     string
	fd       int
	offloads uint
	// Created is true when this process created the tap (it then goes
	// away when the tap is closed), false when it opened an existing one.
	Created bool
}

// OpenTap opens the tap called name, creating it when it does not exist
// (that needs CAP_NET_ADMIN), and brings it up when it created it.
func OpenTap(name string, mtu int) (*Tap, error) {
	if len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tap name %q is longer than %d bytes", name, unix.IFNAMSIZ-1)
	}
	_, lookupErr := netlink.LinkByName(name)
	existed := lookupErr == nil
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open /dev/net/tun: %v (load the tun module, or run as root)", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap name %q: %v", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, tapOpenError(name, existed, err)
	}
	t := &Tap{name: ifr.Name(), fd: fd, Created: !existed}
	t.offloads = t.probeOffloads()
	if t.Created {
		if err := t.bringUp(mtu); err != nil {
			t.Close()
			return nil, err
		}
	}
	return t, nil
}

func tapOpenError(name string, existed bool, err error) error {
	switch {
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("tap %s is busy: another program has it open (stop it or use another tap)", name)
	case errors.Is(err, unix.EPERM) && !existed:
		return fmt.Errorf("cannot create tap %s: permission denied (create it first: ip tuntap add %s mode tap vnet_hdr user $USER)", name, name)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("cannot open tap %s: permission denied (it belongs to another user; recreate it with user $USER)", name)
	case errors.Is(err, unix.EINVAL) && existed:
		return fmt.Errorf("cannot open %s as a tap: it is another kind of interface (pick another name)", name)
	default:
		return fmt.Errorf("cannot open tap %s: %v", name, err)
	}
}

// probeOffloads finds the largest set of offloads the tap accepts, then
// turns them off until a driver acks the matching features.
func (t *Tap) probeOffloads() uint {
	var accepted uint
	for _, try := range []uint{tunFCsum | tunFTSO4 | tunFTSO6, tunFCsum | tunFTSO4, tunFCsum} {
		if t.SetOffload(try) == nil {
			accepted = try
			break
		}
	}
	t.SetOffload(0)
	return accepted
}

func (t *Tap) bringUp(mtu int) error {
	link, err := netlink.LinkByName(t.name)
	if err != nil {
		return fmt.Errorf("created tap %s but cannot find it: %v", t.name, err)
	}
	if mtu > 0 && link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("cannot set mtu %d on tap %s: %v", mtu, t.name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("cannot bring tap %s up: %v", t.name, err)
	}
	return nil
}

// Name implements Backend.
func (t *Tap) Name() string { return t.name }

// Fd implements Backend.
func (t *Tap) Fd() int { return t.fd }

// Offloads implements Backend.
func (t *Tap) Offloads() uint { return t.offloads }

// SetVnetHdrSize implements Backend.
func (t *Tap) SetVnetHdrSize(n int) error {
	v := int32(n)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.fd), unix.TUNSETVNETHDRSZ, uintptr(unsafe.Pointer(&v))); e != 0 {
		return fmt.Errorf("tap %s: cannot set vnet header size %d: %v", t.name, n, e)
	}
	return nil
}

// SetOffload implements Backend.
func (t *Tap) SetOffload(flags uint) error {
	if err := unix.IoctlSetInt(t.fd, unix.TUNSETOFFLOAD, int(flags)); err != nil {
		return fmt.Errorf("tap %s: offloads %#x refused: %v", t.name, flags, err)
	}
	return nil
}

// Close implements Backend; a tap we created disappears with it.
func (t *Tap) Close() error {
	if t.fd < 0 {
		return nil
	}
	err := unix.Close(t.fd)
	t.fd = -1
	return err
}

// Opened says what OpenTap did, for the VMM's one-line notice.
func (t *Tap) Opened() string {
	if t.Created {
		return "created " + t.name
	}
	return "opened existing " + t.name
}
