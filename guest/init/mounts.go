package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mount is one file system init sets up before anything runs.
type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

var mounts = []mount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666"},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
}

// mountAll mounts what user space expects. It goes on past a failure so that
// a missing kernel option costs one file system, not the boot.
func mountAll() error {
	var errs []error
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err))
		}
	}
	return errors.Join(errs...)
}
