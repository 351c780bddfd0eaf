package sharefs

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// This file exports the share's discipline to servers that keep their own
// node table (virtiofs): every path they open goes through OpenBeneath or
// OpenAt, so the kernel refuses "..", absolute paths and every symlink on
// the way, at the moment of use.

// OpenBeneath opens rel (relative to the share's root) with flags, as the
// 9p server does: never following a symlink, so a symlink that is the last
// component is opened itself only with O_PATH and refused (ELOOP) otherwise.
func (s *Share) OpenBeneath(rel string, flags int) (int, error) {
	return s.lookup(rel, flags)
}

// OpenAt opens the single component name in the directory dirfd with
// openat2 and the share's resolve flags, O_NOFOLLOW and O_CLOEXEC added;
// mode is used with O_CREAT. dirfd must itself have been opened beneath a
// share.
func OpenAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	if err := checkName(name); err != nil && name != "." {
		return -1, err
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolve}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(dirfd, name, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// CheckName refuses what is not a single path component: "", ".", "..",
// a slash or a NUL.
func CheckName(name string) error { return checkName(name) }

// Reopen opens the node behind the O_PATH fd pathFD again with flags,
// through /proc/self/fd: the very inode pathFD names, whatever name it has
// now, so nothing swapped in under its name since can be reached. The
// caller checks the node's type first: a device node or a symlink must
// never be reopened.
func Reopen(pathFD int, flags int) (int, error) {
	for {
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pathFD), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// Statfs reports on the file system holding the share's root.
func (s *Share) Statfs(st *unix.Statfs_t) error {
	return s.withRoot(func(root int) error { return unix.Fstatfs(root, st) })
}
