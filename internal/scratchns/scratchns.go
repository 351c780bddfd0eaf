// Package scratchns gives tests and benchmarks a network namespace of
// their own, with a tap and an address inside, so that no packet ever
// touches the machine's own namespace.
//
// The namespaces are anonymous: made with unshare(CLONE_NEWNET) on a locked
// thread and held only by a file descriptor (and by whatever is open inside:
// sockets, tap fds, processes started there). Nothing is mounted under
// /run/netns, so nothing can outlive the process: when the last holder goes,
// Close or the process's death (even SIGKILL), the kernel removes the
// namespace and every interface in it, persistent taps included. A named
// namespace could leak both ways: a SIGKILLed test never deletes it, and a
// concurrent `ip netns add` that bind-mounts /run/netns over itself hides
// the nsfs mount so that deleting it fails.
package scratchns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NS is an anonymous network namespace this process created.
type NS struct {
	// Name labels the namespace in messages (prefix-PID-N); it is not in
	// /run/netns, so `ip netns exec` cannot find it: start commands in it
	// with Do(cmd.Start).
	Name   string
	handle netns.NsHandle
}

var seq atomic.Uint32

// Usable says why namespaces and taps cannot be made here, or "" if they can.
func Usable() string {
	if os.Geteuid() != 0 {
		return "needs root for network namespaces and taps"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "no /dev/net/tun on this machine"
	}
	return ""
}

// New creates a namespace labelled prefix-PID-N with its loopback up. The
// calling thread's namespace is left as it was.
func New(prefix string) (*NS, error) {
	if why := Usable(); why != "" {
		return nil, errors.New(why)
	}
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	type result struct {
		h   netns.NsHandle
		err error
	}
	res := make(chan result, 1)
	go func() {
		// unshare moves this thread into the new namespace; the thread
		// goes back, or dies with the goroutine (still locked) if it cannot.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer orig.Close()
		h, err := netns.New() // unshare(CLONE_NEWNET), then an fd on it
		if err == nil {
			if lo, lerr := netlink.LinkByName("lo"); lerr == nil {
				netlink.LinkSetUp(lo)
			}
		}
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		res <- result{h, err}
	}()
	r := <-res
	if r.err != nil {
		return nil, fmt.Errorf("cannot create network namespace %s: %v", name, r.err)
	}
	return &NS{Name: name, handle: r.h}, nil
}

// Do runs f on a thread inside the namespace. Sockets and taps that f
// opens stay in the namespace and may be used from any thread afterwards;
// a process that f starts (Do(cmd.Start)) runs in it: a child gets the
// namespaces of the thread that forks it.
func (n *NS) Do(f func() error) error {
	if n.handle == netns.None() {
		return fmt.Errorf("namespace %s is closed", n.Name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(n.handle); err != nil {
			errc <- fmt.Errorf("cannot enter namespace %s: %v", n.Name, err)
			return
		}
		ferr := f()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// AddTap creates a persistent tap (IFF_VNET_HDR) in the namespace, gives it
// addr (CIDR, "10.0.2.1/24") and brings it up. It returns the tap's MAC.
func (n *NS) AddTap(name, addr string) (mac net.HardwareAddr, err error) {
	return n.addTap(name, addr, 0)
}

// AddMultiQueueTap is AddTap for a tap made with IFF_MULTI_QUEUE, which a
// device of several queue pairs opens once per pair.
func (n *NS) AddMultiQueueTap(name, addr string) (mac net.HardwareAddr, err error) {
	return n.addTap(name, addr, unix.IFF_MULTI_QUEUE)
}

func (n *NS) addTap(name, addr string, flags uint16) (mac net.HardwareAddr, err error) {
	err = n.Do(func() error {
		if err := createPersistentTap(name, flags); err != nil {
			return err
		}
		link, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(link, a); err != nil {
			return fmt.Errorf("address %s on %s: %v", addr, name, err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		mac = link.Attrs().HardwareAddr
		return nil
	})
	return mac, err
}

// AddVeth creates a veth pair a<->b in the namespace, both up.
func (n *NS) AddVeth(a, b string) error {
	return n.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("veth %s-%s: %v", a, b, err)
		}
		for _, name := range []string{a, b} {
			link, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
		}
		return nil
	})
}

// AddAddr gives dev the address addr (CIDR).
func (n *NS) AddAddr(dev, addr string) error {
	return n.Do(func() error {
		link, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(link, a)
	})
}

// AddNeighbor adds a permanent ARP entry on dev, so the kernel sends to ip
// without asking.
func (n *NS) AddNeighbor(dev string, ip net.IP, mac net.HardwareAddr) error {
	return n.Do(func() error {
		link, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		return netlink.NeighAdd(&netlink.Neigh{
			LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: ip, HardwareAddr: mac,
		})
	})
}

func createPersistentTap(name string, flags uint16) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR | flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("create tap %s: %v", name, err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("make tap %s persistent: %v", name, err)
	}
	return nil
}

// Close lets go of the namespace. The kernel removes it, with its
// interfaces, once nothing else holds it: close sockets and tap fds opened
// inside, and wait for processes started inside, before Close.
func (n *NS) Close() error {
	if n.handle == netns.None() {
		return nil
	}
	err := n.handle.Close()
	n.handle = netns.None()
	if err != nil {
		return fmt.Errorf("cannot close namespace %s: %v", n.Name, err)
	}
	return nil
}
