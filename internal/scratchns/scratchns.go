// Package scratchns gives tests and benchmarks a network namespace of
// their own, with a tap and an address inside, so that no packet ever
// touches the machine's own namespace. Close removes the namespace and
// everything in it (the tap included).
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

// NS is a named network namespace this process created.
type NS struct {
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

// New creates a namespace called prefix-PID-N with its loopback up. The
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
		// netns.NewNamed moves this thread into the new namespace; the
		// thread goes back, or dies with the goroutine if it cannot.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(name)
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
// opens stay in the namespace and may be used from any thread afterwards.
func (n *NS) Do(f func() error) error {
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
	err = n.Do(func() error {
		if err := createPersistentTap(name); err != nil {
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

func createPersistentTap(name string) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("create tap %s: %v", name, err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("make tap %s persistent: %v", name, err)
	}
	return nil
}

// Close deletes the namespace; the kernel removes its interfaces once
// nothing holds it any more.
func (n *NS) Close() error {
	if n.handle == netns.None() {
		return nil
	}
	n.handle.Close()
	n.handle = netns.None()
	if err := netns.DeleteNamed(n.Name); err != nil {
		return fmt.Errorf("cannot delete namespace %s: %v", n.Name, err)
	}
	return nil
}
