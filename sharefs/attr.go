package sharefs

import (
	"encoding/binary"
	"os"
	"strconv"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// SetAttr implements p9.File: mode, owner, size and times, each on the
// node itself, never through a symlink.
func (f *File) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	fd, err := f.share.lookup(f.rel, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	// An O_PATH fd names the node; /proc/self/fd/N reaches it for the
	// calls that take no fd, and it is a symlink only when the node is.
	byFD := "/proc/self/fd/" + strconv.Itoa(fd)

	if valid.Permissions {
		if isLink {
			return unix.EOPNOTSUPP // Linux has no mode for symlinks
		}
		if err := unix.Chmod(byFD, uint32(attr.Permissions.Permissions())); err != nil {
			return err
		}
	}
	if valid.UID || valid.GID {
		if err := mayChown(&st, valid, attr); err != nil {
			return err
		}
		uid, gid := -1, -1
		if valid.UID {
			uid = int(attr.UID)
		}
		if valid.GID {
			gid = int(attr.GID)
		}
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if valid.Size {
		if err := f.truncate(int64(attr.Size)); err != nil {
			return err
		}
	}
	if valid.ATime || valid.MTime {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if valid.ATime {
			ts[0] = timeSpec(valid.ATimeNotSystemTime, attr.ATimeSeconds, attr.ATimeNanoSeconds)
		}
		if valid.MTime {
			ts[1] = timeSpec(valid.MTimeNotSystemTime, attr.MTimeSeconds, attr.MTimeNanoSeconds)
		}
		dfd, name, err := f.parent()
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		if err := unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}

// mayChown lets the guest change ownership only as far as the host lets
// an unprivileged user: the owner never changes, and the group changes
// only on a file the VMM's user owns, to one of the VMM's own groups. So
// every file in the share keeps belonging to the user running tinyvmm,
// even when that is root, whom the kernel would let give files to anyone:
// the guest gets the EPERM an unprivileged tinyvmm gets from the kernel.
// (QEMU's 9p passes a chown through in its passthrough model; its mapped
// model keeps the guest's owner in an xattr and leaves the host's file
// owned by QEMU's user, which is the promise kept here, without the
// xattrs.)
func mayChown(st *unix.Stat_t, valid p9.SetAttrMask, attr p9.SetAttr) error {
	if valid.UID && uint32(attr.UID) != st.Uid {
		return unix.EPERM
	}
	if valid.GID && uint32(attr.GID) != st.Gid {
		if st.Uid != uint32(os.Geteuid()) || !inGroup(uint32(attr.GID)) {
			return unix.EPERM
		}
	}
	return nil
}

// inGroup reports whether the process is in group gid.
func inGroup(gid uint32) bool {
	if gid == uint32(os.Getegid()) {
		return true
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if uint32(g) == gid {
			return true
		}
	}
	return false
}

// truncate sets the size, through the open fd when it can write.
func (f *File) truncate(size int64) error {
	if f.file != nil {
		if err := unix.Ftruncate(int(f.file.Fd()), size); err != unix.EBADF && err != unix.EINVAL {
			return err
		}
	}
	fd, err := f.share.lookup(f.rel, unix.O_WRONLY|unix.O_NONBLOCK)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Ftruncate(fd, size)
}

// timeSpec is the guest's time when it gave one, else "now".
func timeSpec(given bool, sec, nsec uint64) unix.Timespec {
	if !given {
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	}
	return unix.Timespec{Sec: int64(sec), Nsec: int64(nsec)}
}

// Readdir implements p9.File. Offsets are the host's directory cookies
// (d_off), so a listing resumes exactly where the guest left it; count is
// the guest's byte budget, and entries past it are read again next time.
func (f *File) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	if f.file == nil {
		return nil, unix.EBADF
	}
	fd := int(f.file.Fd())
	if _, err := unix.Seek(fd, int64(offset), 0); err != nil {
		return nil, err
	}
	var out p9.Dirents
	used := 0
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return out, err
		}
		if n <= 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				return out, unix.EIO
			}
			ino, off, typ := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:]), b[18]
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			b = b[reclen:]
			size := 24 + len(name) // qid 13, offset 8, type 1, name 2+len
			if used+size > int(count) {
				return out, nil
			}
			used += size
			qt := dirQIDType(typ)
			out = append(out, p9.Dirent{QID: p9.QID{Type: qt, Path: ino}, Offset: off, Type: qt, Name: string(name)})
		}
	}
}

// dirQIDType maps a dirent's d_type to a QID type.
func dirQIDType(t uint8) p9.QIDType {
	switch t {
	case unix.DT_DIR:
		return p9.TypeDir
	case unix.DT_LNK:
		return p9.TypeSymlink
	case unix.DT_FIFO, unix.DT_SOCK, unix.DT_CHR:
		return p9.TypeAppendOnly
	}
	return p9.TypeRegular
}
