package netbackend

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A multi-queue tap (Documentation/networking/tuntap.rst, "Multiqueue
// tuntap interface"): each TUNSETIFF with IFF_MULTI_QUEUE on another
// /dev/net/tun fd attaches one more queue, the kernel spreads the frames
// it sends to the tap over the attached queues by flow, and TUNSETQUEUE
// detaches a queue (its fd then gets nothing, and takes nothing) or
// attaches it again.

// mqFlag is the TUNSETIFF flag for a tap of queues fds.
func mqFlag(queues int) uint16 {
	if queues > 1 {
		return unix.IFF_MULTI_QUEUE
	}
	return 0
}

// openQueues attaches queues-1 more fds to the tap t.fd is on.
func (t *Tap) openQueues(queues int) error {
	if queues <= 1 {
		return nil
	}
	t.queueFds = []int{t.fd}
	t.detached = make([]bool, queues)
	for len(t.queueFds) < queues {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cannot open /dev/net/tun: %v", err)
		}
		ifr, err := unix.NewIfreq(t.name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("tap %s: cannot attach queue %d: %v", t.name, len(t.queueFds), err)
		}
		t.queueFds = append(t.queueFds, fd)
	}
	return nil
}

// QueueFds implements virtionet.MultiQueue: one fd per queue, or just Fd.
func (t *Tap) QueueFds() []int {
	if len(t.queueFds) == 0 {
		return []int{t.fd}
	}
	return t.queueFds
}

// SetQueueEnabled implements virtionet.MultiQueue with TUNSETQUEUE.
func (t *Tap) SetQueueEnabled(i int, on bool) error {
	if i < 0 || i >= len(t.queueFds) {
		if i == 0 && on {
			return nil // a single-queue tap's only queue
		}
		return fmt.Errorf("tap %s has no queue %d", t.name, i)
	}
	if t.detached[i] == !on {
		return nil
	}
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return err
	}
	flag := uint16(unix.IFF_DETACH_QUEUE)
	if on {
		flag = unix.IFF_ATTACH_QUEUE
	}
	ifr.SetUint16(flag)
	if err := unix.IoctlIfreq(t.queueFds[i], unix.TUNSETQUEUE, ifr); err != nil {
		if errors.Is(err, unix.EINVAL) && !on {
			err = fmt.Errorf("%v (the last attached queue cannot be detached)", err)
		}
		return fmt.Errorf("tap %s: queue %d: %v", t.name, i, err)
	}
	t.detached[i] = !on
	return nil
}

// SingleQueueTap reports whether name is an existing tap made without
// IFF_MULTI_QUEUE, which only a single-queue open can attach to. Call it
// in the tap's namespace.
func SingleQueueTap(name string) bool {
	if name == "" {
		return false
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return false
	}
	tt, ok := link.(*netlink.Tuntap)
	return ok && tt.Flags&netlink.TUNTAP_MULTI_QUEUE == 0
}

// isMultiQueueTap reports whether link is a tap made with IFF_MULTI_QUEUE.
func isMultiQueueTap(link netlink.Link) bool {
	tt, ok := link.(*netlink.Tuntap)
	return ok && tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0
}
