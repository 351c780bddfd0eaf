// Package sharefs serves one host directory to a 9P2000.L server
// (github.com/hugelgupf/p9) so that no request can reach outside it.
//
// p9's own fsimpl/localfs is not safe for a hostile guest: it joins names
// into host paths and calls os.Lstat/os.OpenFile on them, so a symlink the
// guest creates (Tsymlink "a" -> "/") makes Twalk ["a", "etc"] or Tlopen of
// "a" reach the host's /etc, and a symlink swapped in between a check and
// a use wins the race. It also sets the process umask to 0 at attach.
//
// Here every lookup is one openat2(2) from the share's root with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS and O_NOFOLLOW:
// the kernel refuses "..", absolute paths and any symlink on the way, at
// the moment of use, so there is no window for a race. The server never
// follows a symlink at all (9P clients resolve them on their side).
// Operations on a name (create, mkdir, unlink, rename, link) go through a
// directory fd opened that way and a single path component.
//
// What a guest can hold in the host is bounded (Limits): the memory of the
// Files alive at once, which bounds its fids (p9's server gives each fid
// its own File), and the host files held open. Past either limit the
// request gets ENFILE.
package sharefs

import (
	"fmt"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// resolve is how every path below the root is looked up.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Limits bound what a guest can hold in the host through one share.
type Limits struct {
	// NodeMemory bounds the VMM memory the Files alive at once take,
	// each charged NodeCost plus the length of its path. p9's server
	// gives every fid its own File, so this bounds the guest's fids.
	NodeMemory int
	// OpenFiles bounds the host files held open at once (Open, Create).
	OpenFiles int
}

// NodeCost is what one fid costs the VMM besides its path: ~400 bytes
// measured (p9's fid and path records, and the File), rounded up.
const NodeCost = 512

// DefaultLimits are the limits Open uses.
//
// A Linux guest mounting with cache=mmap keeps a fid for each dentry it
// caches, and drops them only under memory pressure, so walking a large
// tree (a kernel checkout: ~90,000 files) needs that many: 128 MiB holds
// ~200,000 fids of typical paths, ~30,000 of the longest. Open files are
// those the guest's processes hold open, like a host user's; OpenWith
// takes at most a quarter of the process's fd limit, so the VMM keeps fds
// for itself whatever the guest does.
var DefaultLimits = Limits{NodeMemory: 128 << 20, OpenFiles: 4096}

// Share is one host directory, the root of a 9P tree.
type Share struct {
	root *os.File // O_PATH|O_DIRECTORY
	// rc holds the root fd for the length of each use, so Close (which a
	// late request of an abandoned session may race) never lets the fd
	// number be reused under a lookup.
	rc syscall.RawConn

	limits           Limits
	nodes, mem, open atomic.Int64 // Files alive, what they are charged, host files open
}

// Open opens dir as a share with DefaultLimits. dir must be an existing
// directory.
func Open(dir string) (*Share, error) { return OpenWith(dir, DefaultLimits) }

// OpenWith opens dir as a share with the limits given; OpenFiles is
// lowered to a quarter of the process's fd limit.
func OpenWith(dir string, limits Limits) (*Share, error) {
	if limits.NodeMemory < NodeCost || limits.OpenFiles < 1 {
		return nil, fmt.Errorf("share %s: limits %+v: give NodeMemory at least NodeCost and OpenFiles at least 1", dir, limits)
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		limits.OpenFiles = int(max(1, min(uint64(limits.OpenFiles), rl.Cur/4)))
	}
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
	return &Share{root: root, rc: rc, limits: limits}, nil
}

// Limits returns the share's limits.
func (s *Share) Limits() Limits { return s.limits }

// Nodes returns how many Files are alive (handed out and not closed).
func (s *Share) Nodes() int { return int(s.nodes.Load()) }

// OpenFiles returns how many host files the share holds open.
func (s *Share) OpenFiles() int { return int(s.open.Load()) }

// take counts one more against limit, or reports that none is left.
func take(n *atomic.Int64, limit int) bool {
	if n.Add(1) > int64(limit) {
		n.Add(-1)
		return false
	}
	return true
}

// adopt counts f among the Files alive until its Close: ENFILE past the
// limit.
func (s *Share) adopt(f *File) (*File, error) {
	charge := int64(NodeCost + len(f.rel))
	if s.mem.Add(charge) > int64(s.limits.NodeMemory) {
		s.mem.Add(-charge)
		return nil, unix.ENFILE
	}
	s.nodes.Add(1)
	f.charge.Store(charge)
	return f, nil
}

// openFD runs open as one more host file held open: ENFILE when the
// share holds its limit. The count goes back when open fails; closeFD and
// Close give it back later.
func (s *Share) openFD(open func() (int, error)) (int, error) {
	if !take(&s.open, s.limits.OpenFiles) {
		return -1, unix.ENFILE
	}
	fd, err := open()
	if err != nil {
		s.open.Add(-1)
	}
	return fd, err
}

// closeFD closes an fd from openFD that no File took.
func (s *Share) closeFD(fd int) {
	unix.Close(fd)
	s.open.Add(-1)
}

// Close releases the root. Files still open keep their own fds.
func (s *Share) Close() error { return s.root.Close() }

// Attach implements p9.Attacher: the root of the share.
func (s *Share) Attach() (p9.File, error) {
	f, err := s.adopt(&File{share: s, rel: "."})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// File is one node of the share, named by its path relative to the root.
// The path is resolved again (safely) at each use, so a File needs no fd
// until it is opened.
type File struct {
	p9.DefaultWalkGetAttr
	templatefs.NoopFile // xattrs: not supported

	share  *Share
	rel    string       // "." for the root; never contains ".." or a leading "/"
	file   *os.File     // after Open or Create; counted in share.open
	charge atomic.Int64 // what adopt charged it, until Close
}

var _ p9.File = (*File)(nil)

// lookup opens rel below the root with flags (O_PATH to only name it),
// never following a symlink: one that is the last component is opened
// itself with O_PATH and refused otherwise (ELOOP).
func (s *Share) lookup(rel string, flags int) (fd int, err error) {
	err = s.withRoot(func(root int) error {
		fd, err = openat2(root, rel, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		return err
	})
	return fd, err
}

// withRoot runs fn with the root fd held open.
func (s *Share) withRoot(fn func(root int) error) error {
	var err error
	if cerr := s.rc.Control(func(fd uintptr) { err = fn(int(fd)) }); cerr != nil {
		return unix.EBADF // the share is closed
	}
	return err
}

func openat2(dirfd int, rel string, flags int) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags), Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN { // EAGAIN: a rename raced the lookup; RESOLVE_* asks us to retry
			continue
		}
		return fd, err
	}
}

// dir opens this File's directory for a name operation.
func (f *File) dir() (int, error) {
	return f.share.lookup(f.rel, unix.O_PATH|unix.O_DIRECTORY)
}

// parent opens the directory holding this File and returns it with the
// File's own name in it. The root is its own parent, named ".".
func (f *File) parent() (int, string, error) {
	if f.rel == "." {
		fd, err := f.share.lookup(".", unix.O_PATH|unix.O_DIRECTORY)
		return fd, ".", err
	}
	fd, err := f.share.lookup(path.Dir(f.rel), unix.O_PATH|unix.O_DIRECTORY)
	return fd, path.Base(f.rel), err
}

// checkName refuses what is not a single path component. The p9 server
// checks this too; sharefs does not rely on it.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.IndexByte(name, 0) >= 0 {
		return unix.EINVAL
	}
	return nil
}

func (f *File) child(name string) *File {
	rel := name
	if f.rel != "." {
		rel = f.rel + "/" + name
	}
	return &File{share: f.share, rel: rel}
}

func qidOf(st *unix.Stat_t) p9.QID {
	return p9.QID{Type: p9.FileMode(st.Mode).QIDType(), Path: st.Ino}
}

// stat looks the File up and stats what it names (a symlink itself).
func (f *File) stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if f.file != nil {
		return st, unix.Fstat(int(f.file.Fd()), &st)
	}
	fd, err := f.share.lookup(f.rel, unix.O_PATH)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	return st, unix.Fstat(fd, &st)
}

// Walk implements p9.File.
func (f *File) Walk(names []string) ([]p9.QID, p9.File, error) {
	if len(names) == 0 {
		c, err := f.share.adopt(&File{share: f.share, rel: f.rel})
		if err != nil {
			return nil, nil, err
		}
		return nil, c, nil
	}
	qids := make([]p9.QID, 0, len(names))
	cur := f
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, nil, err
		}
		next := cur.child(name)
		st, err := next.stat()
		if err != nil {
			return nil, nil, err
		}
		qids = append(qids, qidOf(&st))
		cur = next
	}
	if _, err := f.share.adopt(cur); err != nil {
		return nil, nil, err
	}
	return qids, cur, nil
}

// GetAttr implements p9.File.
func (f *File) GetAttr(req p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	st, err := f.stat()
	if err != nil {
		return p9.QID{}, p9.AttrMask{}, p9.Attr{}, err
	}
	attr := p9.Attr{
		Mode: p9.FileMode(st.Mode), UID: p9.UID(st.Uid), GID: p9.GID(st.Gid),
		NLink: p9.NLink(st.Nlink), RDev: p9.Dev(st.Rdev), Size: uint64(st.Size),
		BlockSize: uint64(st.Blksize), Blocks: uint64(st.Blocks),
		ATimeSeconds: uint64(st.Atim.Sec), ATimeNanoSeconds: uint64(st.Atim.Nsec),
		MTimeSeconds: uint64(st.Mtim.Sec), MTimeNanoSeconds: uint64(st.Mtim.Nsec),
		CTimeSeconds: uint64(st.Ctim.Sec), CTimeNanoSeconds: uint64(st.Ctim.Nsec),
	}
	valid := p9.AttrMask{Mode: true, UID: true, GID: true, NLink: true, RDev: true, Size: true,
		Blocks: true, ATime: true, MTime: true, CTime: true, INo: true}
	return qidOf(&st), valid, attr, nil
}

// StatFS implements p9.File: the file system holding the share.
func (f *File) StatFS() (p9.FSStat, error) {
	var s unix.Statfs_t
	if err := f.share.withRoot(func(root int) error { return unix.Fstatfs(root, &s) }); err != nil {
		return p9.FSStat{}, err
	}
	return p9.FSStat{
		Type: uint32(s.Type), BlockSize: uint32(s.Bsize), Blocks: s.Blocks, BlocksFree: s.Bfree,
		BlocksAvailable: s.Bavail, Files: s.Files, FilesFree: s.Ffree,
		FSID: uint64(uint32(s.Fsid.Val[0])) | uint64(uint32(s.Fsid.Val[1]))<<32, NameLength: uint32(s.Namelen),
	}, nil
}

// Open implements p9.File. Only the access mode is taken from the guest:
// truncation comes as a SetAttr, and creation as Create.
func (f *File) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	if f.file != nil {
		return p9.QID{}, 0, unix.EBUSY
	}
	fd, err := f.share.openFD(func() (int, error) { return f.share.lookup(f.rel, mode.OSFlags()|unix.O_NONBLOCK) })
	if err != nil {
		return p9.QID{}, 0, err
	}
	// O_NONBLOCK so that opening a FIFO cannot hang the device (regular
	// files and directories ignore it).
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.share.closeFD(fd)
		return p9.QID{}, 0, err
	}
	f.file = os.NewFile(uintptr(fd), f.rel)
	return qidOf(&st), 0, nil
}

// ReadAt implements p9.File.
func (f *File) ReadAt(p []byte, offset int64) (int, error) {
	if f.file == nil {
		return 0, unix.EBADF
	}
	n, err := unix.Pread(int(f.file.Fd()), p, offset)
	if n < 0 {
		n = 0
	}
	return n, err
}

// WriteAt implements p9.File.
func (f *File) WriteAt(p []byte, offset int64) (int, error) {
	if f.file == nil {
		return 0, unix.EBADF
	}
	n, err := unix.Pwrite(int(f.file.Fd()), p, offset)
	if n < 0 {
		n = 0
	}
	return n, err
}

// FSync implements p9.File.
func (f *File) FSync() error {
	if f.file == nil {
		return unix.EBADF
	}
	return unix.Fsync(int(f.file.Fd()))
}

// Close implements p9.File: the server calls it once it drops the File
// (a clunk, a failed walk, the end of the session).
func (f *File) Close() error {
	if c := f.charge.Swap(0); c != 0 {
		f.share.mem.Add(-c)
		f.share.nodes.Add(-1)
	}
	if f.file == nil {
		return nil
	}
	err := f.file.Close()
	f.file = nil
	f.share.open.Add(-1)
	return err
}

// Create implements p9.File: a new regular file in this directory, opened.
func (f *File) Create(name string, mode p9.OpenFlags, perm p9.FileMode, _ p9.UID, _ p9.GID) (p9.File, p9.QID, uint32, error) {
	if err := checkName(name); err != nil {
		return nil, p9.QID{}, 0, err
	}
	c, err := f.share.adopt(f.child(name))
	if err != nil {
		return nil, p9.QID{}, 0, err
	}
	fd, err := f.share.openFD(func() (int, error) { return f.create(name, mode, perm) })
	if err != nil {
		c.Close()
		return nil, p9.QID{}, 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.share.closeFD(fd)
		c.Close()
		return nil, p9.QID{}, 0, err
	}
	c.file = os.NewFile(uintptr(fd), c.rel)
	return c, qidOf(&st), 0, nil
}

// create makes the regular file name in this directory and opens it.
func (f *File) create(name string, mode p9.OpenFlags, perm p9.FileMode) (int, error) {
	dfd, err := f.dir()
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	return unix.Openat(dfd, name, mode.OSFlags()|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Permissions()))
}

// Mkdir implements p9.File.
func (f *File) Mkdir(name string, perm p9.FileMode, _ p9.UID, _ p9.GID) (p9.QID, error) {
	return f.makeAt(name, func(dfd int) error { return unix.Mkdirat(dfd, name, uint32(perm.Permissions())) })
}

// Symlink implements p9.File. The target is only stored: sharefs never
// follows a symlink, so it may say anything.
func (f *File) Symlink(target, name string, _ p9.UID, _ p9.GID) (p9.QID, error) {
	return f.makeAt(name, func(dfd int) error { return unix.Symlinkat(target, dfd, name) })
}

// Mknod implements p9.File: FIFOs and sockets only, never device nodes.
func (f *File) Mknod(name string, mode p9.FileMode, _, _ uint32, _ p9.UID, _ p9.GID) (p9.QID, error) {
	if !mode.IsNamedPipe() && !mode.IsSocket() {
		return p9.QID{}, unix.EPERM
	}
	return f.makeAt(name, func(dfd int) error {
		return unix.Mknodat(dfd, name, uint32(mode.FileType())|uint32(mode.Permissions()), 0)
	})
}

// makeAt runs make in this directory and returns the new node's QID.
func (f *File) makeAt(name string, make func(dfd int) error) (p9.QID, error) {
	if err := checkName(name); err != nil {
		return p9.QID{}, err
	}
	dfd, err := f.dir()
	if err != nil {
		return p9.QID{}, err
	}
	defer unix.Close(dfd)
	if err := make(dfd); err != nil {
		return p9.QID{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return p9.QID{}, err
	}
	return qidOf(&st), nil
}

// Link implements p9.File: a hard link to target, named name here.
func (f *File) Link(target p9.File, name string) error {
	t, ok := target.(*File)
	if !ok || t.share != f.share {
		return unix.EXDEV
	}
	if err := checkName(name); err != nil {
		return err
	}
	tdir, tname, err := t.parent()
	if err != nil {
		return err
	}
	defer unix.Close(tdir)
	dfd, err := f.dir()
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return unix.Linkat(tdir, tname, dfd, name, 0) // 0: a symlink is linked, not followed
}

// RenameAt implements p9.File.
func (f *File) RenameAt(oldName string, newDir p9.File, newName string) error {
	nd, ok := newDir.(*File)
	if !ok || nd.share != f.share {
		return unix.EXDEV
	}
	if err := checkName(oldName); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	ofd, err := f.dir()
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, err := nd.dir()
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	return unix.Renameat(ofd, oldName, nfd, newName)
}

// Renamed implements p9.File: the server tells each File of its new name.
func (f *File) Renamed(newDir p9.File, newName string) {
	if nd, ok := newDir.(*File); ok && checkName(newName) == nil {
		f.rel = nd.child(newName).rel
	}
}

// UnlinkAt implements p9.File.
func (f *File) UnlinkAt(name string, flags uint32) error {
	if err := checkName(name); err != nil {
		return err
	}
	dfd, err := f.dir()
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return unix.Unlinkat(dfd, name, int(flags)&unix.AT_REMOVEDIR)
}

// Readlink implements p9.File.
func (f *File) Readlink() (string, error) {
	fd, err := f.share.lookup(f.rel, unix.O_PATH)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf) // "" reads the O_PATH symlink itself
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Lock implements p9.File with flock(2) on the whole file, never waiting:
// the Linux client retries a blocked lock itself.
func (f *File) Lock(_ int, lt p9.LockType, _ p9.LockFlags, _, _ uint64, _ string) (p9.LockStatus, error) {
	if f.file == nil {
		return p9.LockStatusError, unix.EBADF
	}
	how := unix.LOCK_UN
	switch lt {
	case p9.ReadLock:
		how = unix.LOCK_SH | unix.LOCK_NB
	case p9.WriteLock:
		how = unix.LOCK_EX | unix.LOCK_NB
	case p9.Unlock:
	default:
		return p9.LockStatusError, unix.EINVAL
	}
	switch err := unix.Flock(int(f.file.Fd()), how); err {
	case nil:
		return p9.LockStatusOK, nil
	case unix.EWOULDBLOCK:
		return p9.LockStatusBlocked, nil
	default:
		return p9.LockStatusError, err
	}
}
