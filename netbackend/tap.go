package netbackend

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
	queueFds []int // IFF_MULTI_QUEUE: every queue's fd, fd first (tap_mq.go)
	detached []bool
	offloads uint
	// Created is true when this process created the tap (it then goes
	// away when the tap is closed), false when it opened an existing one.
	Created bool

	// An existing tap keeps the flags and vnet header size of its last
	// opener after that one exits; Close gives back the ones it had.
	// restoreFd is a /dev/net/tun fd opened beside fd, so that the restore
	// happens in the tap's namespace whichever thread calls Close.
	restoreFd    int
	restoreFlags uint16 // IFF_TAP plus the tap's own NO_PI and VNET_HDR
	restoreHdr   int32  // vnet header size before we changed it
}

// OpenTap opens the tap called name, creating it when it does not exist
// (that needs CAP_NET_ADMIN), and brings it up when it created it.
func OpenTap(name string, mtu int) (*Tap, error) { return OpenTapQueues(name, mtu, 1) }

// OpenTapQueues is OpenTap with queues fds: more than one opens the tap
// with IFF_MULTI_QUEUE, one fd per queue (tap_mq.go).
func OpenTapQueues(name string, mtu, queues int) (*Tap, error) {
	if len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tap name %q is longer than %d bytes", name, unix.IFNAMSIZ-1)
	}
	link, lookupErr := netlink.LinkByName(name)
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
	mq := mqFlag(queues)
	if existed && isMultiQueueTap(link) {
		mq = unix.IFF_MULTI_QUEUE // such a tap takes only multi-queue opens, even of one queue
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | mq)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if queues > 1 && existed && SingleQueueTap(name) {
			return nil, fmt.Errorf("tap %s has one queue: for queues=%d create it with multi_queue (ip tuntap add %s mode tap vnet_hdr multi_queue), or use queues=1", name, queues, name)
		}
		return nil, tapOpenError(name, existed, err)
	}
	t := &Tap{name: ifr.Name(), fd: fd, Created: !existed, restoreFd: -1}
	if err := t.openQueues(queues); err != nil {
		t.Close()
		return nil, err
	}
	if existed {
		if err := t.saveFlags(link, mq); err != nil {
			t.Close()
			return nil, err
		}
	}
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

// tapFeatures are the flags a tap's opener chooses (TUN_FEATURES in the
// kernel, less the multi-queue and NAPI ones tinyvmm never opens with).
const tapFeatures = unix.IFF_NO_PI | unix.IFF_VNET_HDR

// saveFlags remembers what Close must put back on an existing tap: its
// flags as netlink reported them before we opened it, and its vnet header
// size. Nothing needs putting back when the tap already had our flags and
// keeps its header size (SetVnetHdrSize restores that on its own).
func (t *Tap) saveFlags(link netlink.Link, mq uint16) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.fd), unix.TUNGETVNETHDRSZ, uintptr(unsafe.Pointer(&t.restoreHdr))); e != 0 {
		return fmt.Errorf("tap %s: cannot read its vnet header size: %v", t.name, e)
	}
	tt, ok := link.(*netlink.Tuntap)
	if !ok || tt.Mode != netlink.TUNTAP_MODE_TAP {
		// A kernel without tun link info (before 4.15): flags unknown.
		return nil
	}
	old := uint16(tt.Flags) & (tapFeatures | mq)
	if old == tapFeatures|mq {
		return nil
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open /dev/net/tun: %v", err)
	}
	t.restoreFd, t.restoreFlags = fd, unix.IFF_TAP|old
	return nil
}

// probeOffloads finds the largest set of offloads the tap accepts, then
// turns them off until a driver acks the matching features.
func (t *Tap) probeOffloads() uint {
	var accepted uint
	for _, try := range []uint{unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6, unix.TUN_F_CSUM | unix.TUN_F_TSO4, unix.TUN_F_CSUM} {
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

// Name implements virtionet.Backend.
func (t *Tap) Name() string { return t.name }

// Fd implements virtionet.Backend.
func (t *Tap) Fd() int { return t.fd }

// Offloads implements virtionet.Backend.
func (t *Tap) Offloads() uint { return t.offloads }

// SetVnetHdrSize implements virtionet.Backend.
func (t *Tap) SetVnetHdrSize(n int) error {
	v := int32(n)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(t.fd), unix.TUNSETVNETHDRSZ, uintptr(unsafe.Pointer(&v))); e != 0 {
		return fmt.Errorf("tap %s: cannot set vnet header size %d: %v", t.name, n, e)
	}
	return nil
}

// SetOffload implements virtionet.Backend.
func (t *Tap) SetOffload(flags uint) error {
	if err := unix.IoctlSetInt(t.fd, unix.TUNSETOFFLOAD, int(flags)); err != nil {
		return fmt.Errorf("tap %s: offloads %#x refused: %v", t.name, flags, err)
	}
	return nil
}

// Close implements virtionet.Backend; a tap we created disappears with it, an
// existing one gets back the flags and vnet header size it had.
func (t *Tap) Close() error {
	if t.fd < 0 {
		return nil
	}
	var errs []error
	if !t.Created && t.restoreHdr != 0 {
		errs = append(errs, t.SetVnetHdrSize(int(t.restoreHdr)))
	}
	errs = append(errs, unix.Close(t.fd))
	for _, fd := range t.queueFds[min(1, len(t.queueFds)):] {
		errs = append(errs, unix.Close(fd))
	}
	t.fd, t.queueFds = -1, nil
	if t.restoreFd >= 0 {
		// Attaching with the old flags sets them; detaching leaves them.
		ifr, err := unix.NewIfreq(t.name)
		if err == nil {
			ifr.SetUint16(t.restoreFlags)
			if err = unix.IoctlIfreq(t.restoreFd, unix.TUNSETIFF, ifr); err != nil {
				err = fmt.Errorf("tap %s: cannot give back its flags %#x: %v", t.name, t.restoreFlags, err)
			}
		}
		errs = append(errs, err, unix.Close(t.restoreFd))
		t.restoreFd = -1
	}
	return errors.Join(errs...)
}

// Opened says what OpenTap did, for the VMM's one-line notice.
func (t *Tap) Opened() string {
	if t.Created {
		return "created " + t.name
	}
	return "opened existing " + t.name
}
