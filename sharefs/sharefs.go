// Package sharefs opens files of one host directory, the share, for a
// file server a hostile guest talks to (virtiofs), so that no request can
// reach outside it.
//
// Every lookup is one openat2(2) from the share's root with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS and O_NOFOLLOW:
// the kernel refuses "..", absolute paths and any symlink on the way, at
// the moment of use, so there is no window for a race. Nothing here
// follows a symlink at all (the guest resolves them on its side).
// Operations on a name (create, mkdir, unlink, rename, link) go through a
// directory fd opened that way and a single path component.
package sharefs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// resolve is how every path below the root is looked up.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Share is one host directory.
type Share struct {
	root *os.File // O_PATH|O_DIRECTORY
	// rc holds the root fd for the length of each use, so Close (which a
	// late request of an abandoned session may race) never lets the fd
	// number be reused under a lookup.
	rc syscall.RawConn
}

// Open opens dir, an existing directory, as a share.
func Open(dir string) (*Share, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("share %s: %w", dir, err)
	}
	// openat2 came with Linux 5.6; without it nothing here is safe.
	probe, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("share %s: openat2: %w (tinyvmm needs Linux 5.6 or later to share directories safely)", dir, err)
	}
	unix.Close(probe)
	root := os.NewFile(uintptr(fd), dir)
	rc, err := root.SyscallConn()
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("share %s: %w", dir, err)
	}
	return &Share{root: root, rc: rc}, nil
}

// Close releases the root. Files opened from it keep their own fds.
func (s *Share) Close() error { return s.root.Close() }

// withRoot runs fn with the root fd held open.
func (s *Share) withRoot(fn func(root int) error) error {
	var err error
	if cerr := s.rc.Control(func(fd uintptr) { err = fn(int(fd)) }); cerr != nil {
		return unix.EBADF // the share is closed
	}
	return err
}

func openat2(dirfd int, rel string, how *unix.OpenHow) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err == unix.EINTR || err == unix.EAGAIN { // EAGAIN: a rename raced the lookup; RESOLVE_* asks us to retry
			continue
		}
		return fd, err
	}
}

// OpenBeneath opens rel (relative to the share's root, "." for the root)
// with flags, never following a symlink: a symlink that is the last
// component is opened itself only with O_PATH and refused (ELOOP)
// otherwise.
func (s *Share) OpenBeneath(rel string, flags int) (fd int, err error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolve}
	err = s.withRoot(func(root int) error {
		fd, err = openat2(root, rel, how)
		return err
	})
	return fd, err
}

// OpenAt opens the single component name in the directory dirfd with
// openat2 and the share's resolve flags, O_NOFOLLOW and O_CLOEXEC added;
// mode is used with O_CREAT. dirfd must itself have been opened beneath a
// share.
func OpenAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	if err := CheckName(name); err != nil && name != "." {
		return -1, err
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolve}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode)
	}
	return openat2(dirfd, name, how)
}

// CheckName refuses what is not a single path component: "", ".", "..",
// a slash or a NUL.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.IndexByte(name, 0) >= 0 {
		return unix.EINVAL
	}
	return nil
}

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
