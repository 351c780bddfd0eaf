package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// setLinkUp sets IFF_UP on an interface. It reports whether the interface
// exists, so that a guest without a NIC is not an error.
func setLinkUp(name string) (exists bool, err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("socket for %s: %w", name, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return false, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return false, nil
		}
		return false, fmt.Errorf("get flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return true, fmt.Errorf("bring %s up: %w", name, err)
	}
	return true, nil
}

// bringUpNetwork brings lo up, and eth0 too unless the kernel's ip= owns
// it; then eth0 gets its address by DHCP (--net user's gateway answers).
func bringUpNetwork(kernelConfiguresEth0 bool) error {
	var errs []error
	if _, err := setLinkUp("lo"); err != nil {
		errs = append(errs, err)
	}
	if !kernelConfiguresEth0 {
		exists, err := setLinkUp("eth0")
		if err != nil {
			errs = append(errs, err)
		} else if exists {
			if err := configureByDHCP(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
