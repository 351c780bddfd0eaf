package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Kernel parameters of tinyvmm's --root.
const (
	// rootParam: the tag of the virtio-fs device holding the new root.
	rootParam = "tinyvmm.root"
	// envParam: base64url of a JSON array of KEY=VALUE for the command.
	envParam = "tinyvmm.env"
)

// newRoot is where the root is put together before init enters it.
const newRoot = "/newroot"

// rootMounts are the file systems the new root gets fresh, over what the
// host's root has there: its own kernel's view, devices, and empty
// scratch space.
var rootMounts = []mount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666"},
	{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
}

// enterRoot makes the device tag the root: read-only below a tmpfs
// overlay that takes every write, fresh /proc, /sys, /dev, /run and /tmp,
// the shares mounted inside, and then chroots into it. Nothing written
// outside a share reaches the host. entered is false when init is still
// in its own root: the command must not run then.
func enterRoot(tag string, shares []share) (entered bool, err error) {
	err = mountRoot(tag, shares)
	var st unix.Stat_t
	if unix.Stat(newRoot+"/root/proc/self", &st) != nil {
		return false, err // nothing usable there
	}
	if cerr := unix.Chroot(newRoot + "/root"); cerr != nil {
		return false, errors.Join(err, fmt.Errorf("chroot: %w", cerr))
	}
	return true, errors.Join(err, os.Chdir("/"))
}

// mountRoot puts the root together in newRoot/root.
func mountRoot(tag string, shares []share) error {
	lower, rw, root := newRoot+"/lower", newRoot+"/rw", newRoot+"/root"
	for _, d := range []string{lower, rw, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(tag, lower, "virtiofs", unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount the root %s: %w", tag, err)
	}
	if err := setReadahead(lower); err != nil {
		warn(err)
	}
	if err := unix.Mount("tmpfs", rw, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount the overlay's tmpfs: %w", err)
	}
	for _, d := range []string{rw + "/upper", rw + "/work"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + rw + "/upper,workdir=" + rw + "/work"
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount the overlay root: %w", err)
	}
	var errs []error
	for _, m := range rootMounts {
		target := filepath.Join(root, m.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Mount(m.source, target, m.fstype, m.flags, m.data); err != nil {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err))
		}
	}
	if err := mountShares(root, shares); err != nil {
		errs = append(errs, err)
	}
	// DHCP ran before the root was entered and named the DNS servers
	// in the initramfs's /etc/resolv.conf; the host's may point at a
	// resolver of its own that does not run here. The overlay takes it.
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil && len(b) > 0 {
		os.Remove(filepath.Join(root, "etc/resolv.conf")) // a symlink into /run, often
		if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), b, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("resolv.conf: %w", err))
		}
	}
	return errors.Join(errs...)
}
