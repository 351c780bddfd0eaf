package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
)

// TapParam on L1's command line, l1init.tap=NAME,ADDR/PREFIX, has l1init
// make a tap with that address before the plan runs: what `make run`'s
// namespace gives the host side (10.0.2.1), so that `make run-nested`
// answers the README's commands the same way.
const TapParam = "l1init.tap="

// setUpNetwork brings up L1's loopback, and the tap the command line asks
// for. L1 is its own machine with no other network: nothing leaves it.
func setUpNetwork() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("loopback: %v", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("loopback up: %v", err)
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, arg := range strings.Fields(string(cmdline)) {
		spec, ok := strings.CutPrefix(arg, TapParam)
		if !ok {
			continue
		}
		name, cidr, ok := strings.Cut(spec, ",")
		if !ok {
			return fmt.Errorf("%s%s: want NAME,ADDR/PREFIX", TapParam, spec)
		}
		if err := makeTap(name, cidr); err != nil {
			return fmt.Errorf("tap %s: %v", name, err)
		}
		fmt.Printf("l1init: tap %s at %s\n", name, cidr)
	}
	return nil
}

// makeTap creates a persistent tap with a vnet header, as `ip tuntap add
// NAME mode tap vnet_hdr` does; tinyvmm opens it as it is.
func makeTap(name, cidr string) error {
	ip, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return err
	}
	tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP,
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR}
	if err := netlink.LinkAdd(tap); err != nil {
		return err
	}
	ipnet.IP = ip
	if err := netlink.AddrAdd(tap, &netlink.Addr{IPNet: ipnet}); err != nil {
		return err
	}
	return netlink.LinkSetUp(tap)
}
