package virtiofs

import (
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
)

// Limits on what one guest can make the device hold.
const (
	// MaxNodes bounds the inodes the guest may know at once (each is a
	// name and a few words, no fd). The kernel forgets inodes only under
	// memory pressure, so this is sized for big trees; past it a lookup
	// fails with ENFILE.
	MaxNodes = 1 << 20
	// MaxHandles bounds the files and directories the guest may have open
	// at once (each is a host fd).
	MaxHandles = 4096
	// maxPath bounds a node's path below the root.
	maxPath = unix.PathMax
)

// fileSystem is the FUSE file system of one session: a table of the nodes
// the guest knows, each named by its parent and its name, and of the files
// it has open. A node is found again at each use by one openat2 from the
// share's root with sharefs's discipline (no "..", no symlink followed),
// and checked to still be the same inode (ESTALE otherwise), so a name
// swapped for a symlink, or for anything else, between a lookup and a use
// is never reached. Open files are reopened through the O_PATH fd of the
// inode that was checked, never by name.
type fileSystem struct {
	fuse.RawFileSystem // what is not implemented here: ENOSYS

	share    *sharefs.Share
	readOnly bool
	cache    Cache
	timeout  time.Duration // entry and attribute validity given to the guest
	rootKey  key

	mu      sync.Mutex
	nodes   map[uint64]*node
	byKey   map[key]*node
	nextID  uint64
	handles map[uint64]*handle
	nextFh  uint64
	hidden  map[key]bool // roots of hiddenFS mounts seen
}

type key struct{ dev, ino uint64 }

func keyOf(st *unix.Stat_t) key { return key{uint64(st.Dev), st.Ino} }

// node is one inode the guest has looked up.
type node struct {
	id      uint64
	parent  *node // nil for the root
	name    string
	key     key
	nlookup uint64
}

// handle is one open file or directory.
type handle struct {
	f    *os.File
	rc   syscall.RawConn
	key  key
	dir  bool
	fifo bool
	mu   sync.Mutex // directories: the seek and getdents of one READDIR
	buf  []byte     // directories: getdents buffer
}

func newFileSystem(share *sharefs.Share, readOnly bool, cache Cache, timeout time.Duration) (*fileSystem, error) {
	fs := &fileSystem{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		share:         share, readOnly: readOnly, cache: cache, timeout: timeout,
		nodes: map[uint64]*node{}, byKey: map[key]*node{}, nextID: 2,
		handles: map[uint64]*handle{}, nextFh: 1, hidden: map[key]bool{},
	}
	fd, err := share.OpenBeneath(".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	fs.rootKey = keyOf(&st)
	root := &node{id: fuse.FUSE_ROOT_ID, key: fs.rootKey, nlookup: 1}
	fs.nodes[root.id] = root
	fs.byKey[root.key] = root
	return fs, nil
}

func (fs *fileSystem) String() string { return "tinyvmm-virtiofs" }

func errno(err error) fuse.Status {
	if err == nil {
		return fuse.OK
	}
	return fuse.ToStatus(err)
}

// node returns the node the guest calls id.
func (fs *fileSystem) node(id uint64) (*node, fuse.Status) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[id]
	if n == nil {
		return nil, fuse.Status(unix.ESTALE)
	}
	return n, fuse.OK
}

// relLocked is n's path below the root.
func (fs *fileSystem) relLocked(n *node) (string, fuse.Status) {
	if n.parent == nil {
		return ".", fuse.OK
	}
	var parts []string
	size := 0
	for m := n; m.parent != nil; m = m.parent {
		size += len(m.name) + 1
		if size > maxPath || len(parts) > maxPath/2 {
			return "", fuse.Status(unix.ENAMETOOLONG)
		}
		parts = append(parts, m.name)
	}
	b := make([]byte, 0, size)
	for i := len(parts) - 1; i >= 0; i-- {
		b = append(b, parts[i]...)
		if i > 0 {
			b = append(b, '/')
		}
	}
	return string(b), fuse.OK
}

// open finds n again beneath the root with flags (O_PATH, usually) and
// checks that it is still the same inode.
func (fs *fileSystem) open(n *node, flags int) (int, unix.Stat_t, fuse.Status) {
	var st unix.Stat_t
	fs.mu.Lock()
	rel, s := fs.relLocked(n)
	k := n.key
	fs.mu.Unlock()
	if !s.Ok() {
		return -1, st, s
	}
	fd, err := fs.share.OpenBeneath(rel, flags)
	if err != nil {
		return -1, st, errno(err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, errno(err)
	}
	if keyOf(&st) != k {
		unix.Close(fd)
		return -1, st, fuse.Status(unix.ESTALE)
	}
	return fd, st, fuse.OK
}

// openID is open for the node the guest calls id.
func (fs *fileSystem) openID(id uint64, flags int) (int, unix.Stat_t, *node, fuse.Status) {
	n, s := fs.node(id)
	if !s.Ok() {
		return -1, unix.Stat_t{}, nil, s
	}
	fd, st, s := fs.open(n, flags)
	return fd, st, n, s
}

// dir opens the directory the guest calls id for an operation on a name
// in it.
func (fs *fileSystem) dir(id uint64, name string) (int, unix.Stat_t, *node, fuse.Status) {
	if err := sharefs.CheckName(name); err != nil {
		return -1, unix.Stat_t{}, nil, errno(err)
	}
	fd, st, n, s := fs.openID(id, unix.O_PATH|unix.O_DIRECTORY)
	if s.Ok() && fs.isHidden(n.key) {
		unix.Close(fd)
		return -1, st, nil, fuse.EACCES
	}
	return fd, st, n, s
}

// isHidden says whether k is the root of a hiddenFS mount.
func (fs *fileSystem) isHidden(k key) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.hidden[k]
}

// hiddenFS are file systems the guest never sees into when a lookup
// crosses a mount point of one below the share (the host's root shared
// whole, say): the host's kernel interfaces and its processes are not the
// guest's business. Their mount points look like empty directories that
// refuse every change, so the guest can still mount its own /proc there.
var hiddenFS = map[int64]bool{
	unix.PROC_SUPER_MAGIC: true, unix.SYSFS_MAGIC: true, unix.DEVPTS_SUPER_MAGIC: true,
	unix.DEBUGFS_MAGIC: true, unix.TRACEFS_MAGIC: true, unix.SECURITYFS_MAGIC: true,
	unix.CGROUP_SUPER_MAGIC: true, unix.CGROUP2_SUPER_MAGIC: true, unix.BPF_FS_MAGIC: true,
	0x65735543: true /* fusectl */, unix.PSTOREFS_MAGIC: true, unix.EFIVARFS_MAGIC: true,
	unix.SELINUX_MAGIC: true, unix.BINFMTFS_MAGIC: true, unix.NSFS_MAGIC: true,
	0x62656570: true /* configfs */, 0x19800202: true, /* mqueue */
}

// stat stats name in the directory dirfd (of device dirDev) without
// following it, and notes the mount points of hiddenFS.
func (fs *fileSystem) stat(dirfd int, dirDev uint64, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, err
	}
	if uint64(st.Dev) == dirDev {
		return st, nil
	}
	fd, err := sharefs.OpenAt(dirfd, name, unix.O_PATH, 0)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return st, err
	}
	if hiddenFS[int64(sfs.Type)] {
		fs.mu.Lock()
		if len(fs.hidden) < MaxNodes {
			fs.hidden[keyOf(&st)] = true
		}
		fs.mu.Unlock()
	}
	return st, nil
}

// entry records that the guest looked up st under name in parent and
// fills out.
func (fs *fileSystem) entry(parent *node, name string, st *unix.Stat_t, out *fuse.EntryOut) fuse.Status {
	k := keyOf(st)
	fs.mu.Lock()
	n := fs.byKey[k]
	if n == nil {
		if len(fs.nodes) >= MaxNodes {
			fs.mu.Unlock()
			return fuse.Status(unix.ENFILE)
		}
		n = &node{id: fs.nextID, key: k}
		fs.nextID++
		fs.nodes[n.id] = n
		fs.byKey[k] = n
	}
	if n.id != fuse.FUSE_ROOT_ID {
		// The name just seen is the one that works now (a hard link,
		// or a rename on the host).
		n.parent, n.name = parent, name
	}
	n.nlookup++
	id := n.id
	fs.mu.Unlock()
	*out = fuse.EntryOut{NodeId: id}
	out.SetEntryTimeout(fs.timeout)
	out.SetAttrTimeout(fs.timeout)
	fs.fillAttr(&out.Attr, st)
	return fuse.OK
}

func (fs *fileSystem) fillAttr(a *fuse.Attr, st *unix.Stat_t) {
	*a = fuse.Attr{
		Ino: st.Ino, Size: uint64(st.Size), Blocks: uint64(st.Blocks),
		Atime: uint64(st.Atim.Sec), Atimensec: uint32(st.Atim.Nsec),
		Mtime: uint64(st.Mtim.Sec), Mtimensec: uint32(st.Mtim.Nsec),
		Ctime: uint64(st.Ctim.Sec), Ctimensec: uint32(st.Ctim.Nsec),
		Mode: st.Mode, Nlink: uint32(st.Nlink), Owner: fuse.Owner{Uid: st.Uid, Gid: st.Gid},
		Rdev: uint32(st.Rdev), Blksize: uint32(st.Blksize),
	}
}

// Lookup implements fuse.RawFileSystem.
func (fs *fileSystem) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	dfd, dst, parent, s := fs.dir(h.NodeId, name)
	if s == fuse.EACCES {
		return fuse.ENOENT // in a hidden mount: nothing there
	}
	if !s.Ok() {
		return s
	}
	defer unix.Close(dfd)
	st, err := fs.stat(dfd, uint64(dst.Dev), name)
	if err != nil {
		return errno(err)
	}
	return fs.entry(parent, name, &st, out)
}

// Forget implements fuse.RawFileSystem.
func (fs *fileSystem) Forget(id, nlookup uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.nodes[id]
	if n == nil || id == fuse.FUSE_ROOT_ID {
		return
	}
	if nlookup >= n.nlookup {
		delete(fs.nodes, id)
		if fs.byKey[n.key] == n {
			delete(fs.byKey, n.key)
		}
		return
	}
	n.nlookup -= nlookup
}

// GetAttr implements fuse.RawFileSystem.
func (fs *fileSystem) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	var st unix.Stat_t
	if in.Flags()&fuse.FUSE_GETATTR_FH != 0 {
		if h := fs.handle(in.Fh()); h != nil {
			if err := h.control(func(fd int) error { return unix.Fstat(fd, &st) }); err != nil {
				return errno(err)
			}
			fs.fillAttr(&out.Attr, &st)
			out.SetTimeout(fs.timeout)
			return fuse.OK
		}
	}
	fd, st, _, s := fs.openID(in.NodeId, unix.O_PATH)
	if !s.Ok() {
		return s
	}
	unix.Close(fd)
	fs.fillAttr(&out.Attr, &st)
	out.SetTimeout(fs.timeout)
	return fuse.OK
}

// safeMode is a mode the guest asks for, without the setuid bit, and
// without setgid except on a directory (where it only passes the group
// on): a guest must not leave a setuid program for the host to run.
func safeMode(mode uint32, dir bool) uint32 {
	m := mode & 0o7777 &^ unix.S_ISUID
	if !dir {
		m &^= unix.S_ISGID
	}
	return m
}

// SetAttr implements fuse.RawFileSystem: mode, owner, size and times, each
// on the checked inode itself, never through a symlink.
func (fs *fileSystem) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if fs.readOnly {
		return fuse.EROFS
	}
	fd, st, n, s := fs.openID(in.NodeId, unix.O_PATH)
	if !s.Ok() {
		return s
	}
	defer unix.Close(fd)
	if fs.isHidden(n.key) {
		return fuse.EACCES
	}
	typ := st.Mode & unix.S_IFMT
	if in.Valid&fuse.FATTR_MODE != 0 {
		if typ == unix.S_IFLNK {
			return fuse.Status(unix.EOPNOTSUPP)
		}
		if err := unix.Fchmodat(unix.AT_FDCWD, procFD(fd), safeMode(in.Mode, typ == unix.S_IFDIR), 0); err != nil {
			return errno(err)
		}
	}
	if in.Valid&(fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		uid, gid := -1, -1
		if in.Valid&fuse.FATTR_UID != 0 {
			uid = int(in.Uid)
		}
		if in.Valid&fuse.FATTR_GID != 0 {
			gid = int(in.Gid)
		}
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errno(err)
		}
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		if typ != unix.S_IFREG {
			return fuse.EINVAL
		}
		var err error = unix.EBADF
		if h := fs.handle(in.Fh); in.Valid&fuse.FATTR_FH != 0 && h != nil && h.key == n.key && !h.dir && !h.fifo {
			err = h.control(func(hfd int) error { return unix.Ftruncate(hfd, int64(in.Size)) })
		}
		if err == unix.EBADF || err == unix.EINVAL {
			wfd, rerr := sharefs.Reopen(fd, unix.O_WRONLY)
			if rerr != nil {
				return errno(rerr)
			}
			err = unix.Ftruncate(wfd, int64(in.Size))
			unix.Close(wfd)
		}
		if err != nil {
			return errno(err)
		}
	}
	if in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW) != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		switch {
		case in.Valid&fuse.FATTR_ATIME_NOW != 0:
			ts[0].Nsec = unix.UTIME_NOW
		case in.Valid&fuse.FATTR_ATIME != 0:
			ts[0] = unix.Timespec{Sec: int64(in.Atime), Nsec: int64(in.Atimensec % 1e9)}
		}
		switch {
		case in.Valid&fuse.FATTR_MTIME_NOW != 0:
			ts[1].Nsec = unix.UTIME_NOW
		case in.Valid&fuse.FATTR_MTIME != 0:
			ts[1] = unix.Timespec{Sec: int64(in.Mtime), Nsec: int64(in.Mtimensec % 1e9)}
		}
		var err error
		if typ == unix.S_IFLNK {
			// utimensat has no empty-path form: the symlink by name in its
			// directory, not followed. A swap there reaches at most
			// another node of the share.
			err = fs.atName(n, func(dfd int, name string) error {
				return unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
			})
		} else {
			err = unix.UtimesNanoAt(unix.AT_FDCWD, procFD(fd), ts, 0)
		}
		if err != nil {
			return errno(err)
		}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return errno(err)
	}
	fs.fillAttr(&out.Attr, &st)
	out.SetTimeout(fs.timeout)
	return fuse.OK
}

// atName runs fn on n's directory and name, after checking the name is
// still n.
func (fs *fileSystem) atName(n *node, fn func(dfd int, name string) error) error {
	fs.mu.Lock()
	parent, name := n.parent, n.name
	fs.mu.Unlock()
	if parent == nil {
		return unix.EINVAL // the root
	}
	dfd, _, s := fs.open(parent, unix.O_PATH|unix.O_DIRECTORY)
	if !s.Ok() {
		return syscall.Errno(s)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if keyOf(&st) != n.key {
		return unix.ESTALE
	}
	return fn(dfd, name)
}

func procFD(fd int) string { return "/proc/self/fd/" + itoa(fd) }

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// makeAt runs mk in the directory id and looks up what it made.
func (fs *fileSystem) makeAt(id uint64, name string, out *fuse.EntryOut, mk func(dfd int) error) fuse.Status {
	if fs.readOnly {
		return fuse.EROFS
	}
	dfd, dst, parent, s := fs.dir(id, name)
	if !s.Ok() {
		return s
	}
	defer unix.Close(dfd)
	if err := mk(dfd); err != nil {
		return errno(err)
	}
	st, err := fs.stat(dfd, uint64(dst.Dev), name)
	if err != nil {
		return errno(err)
	}
	return fs.entry(parent, name, &st, out)
}

// Mkdir implements fuse.RawFileSystem.
func (fs *fileSystem) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	mode := safeMode(in.Mode, true)
	return fs.makeAt(in.NodeId, name, out, func(dfd int) error {
		if err := unix.Mkdirat(dfd, name, mode); err != nil {
			return err
		}
		// The host's umask narrowed it: the guest's mode, as asked.
		return fchmodName(dfd, name, mode)
	})
}

// fchmodName sets the mode of the directory or file name just made in dfd.
func fchmodName(dfd int, name string, mode uint32) error {
	fd, err := sharefs.OpenAt(dfd, name, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o7777 == mode {
		return err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG && t != unix.S_IFIFO && t != unix.S_IFSOCK {
		return nil
	}
	return unix.Fchmodat(unix.AT_FDCWD, procFD(fd), mode, 0)
}

// Mknod implements fuse.RawFileSystem: FIFOs, sockets and empty regular
// files; never a device node.
func (fs *fileSystem) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	typ := in.Mode & unix.S_IFMT
	if typ != unix.S_IFIFO && typ != unix.S_IFSOCK && typ != unix.S_IFREG {
		return fuse.EPERM
	}
	mode := safeMode(in.Mode, false)
	return fs.makeAt(in.NodeId, name, out, func(dfd int) error {
		if err := unix.Mknodat(dfd, name, typ|mode, 0); err != nil {
			return err
		}
		return fchmodName(dfd, name, mode)
	})
}

// Symlink implements fuse.RawFileSystem. The target is only stored: the
// device never follows a symlink.
func (fs *fileSystem) Symlink(_ <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if len(target) == 0 || len(target) >= unix.PathMax {
		return fuse.Status(unix.ENAMETOOLONG)
	}
	return fs.makeAt(h.NodeId, name, out, func(dfd int) error { return unix.Symlinkat(target, dfd, name) })
}

// Unlink implements fuse.RawFileSystem.
func (fs *fileSystem) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fs.removeAt(h.NodeId, name, 0)
}

// Rmdir implements fuse.RawFileSystem.
func (fs *fileSystem) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fs.removeAt(h.NodeId, name, unix.AT_REMOVEDIR)
}

func (fs *fileSystem) removeAt(id uint64, name string, flags int) fuse.Status {
	if fs.readOnly {
		return fuse.EROFS
	}
	dfd, _, _, s := fs.dir(id, name)
	if !s.Ok() {
		return s
	}
	defer unix.Close(dfd)
	return errno(unix.Unlinkat(dfd, name, flags))
}

// Rename implements fuse.RawFileSystem (RENAME and RENAME2).
func (fs *fileSystem) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if fs.readOnly {
		return fuse.EROFS
	}
	if in.Flags&^(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) != 0 {
		return fuse.EINVAL
	}
	ofd, _, odir, s := fs.dir(in.NodeId, oldName)
	if !s.Ok() {
		return s
	}
	defer unix.Close(ofd)
	nfd, _, ndir, s := fs.dir(in.Newdir, newName)
	if !s.Ok() {
		return s
	}
	defer unix.Close(nfd)
	var ost, nst unix.Stat_t
	if err := unix.Fstatat(ofd, oldName, &ost, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return errno(err)
	}
	haveNew := unix.Fstatat(nfd, newName, &nst, unix.AT_SYMLINK_NOFOLLOW) == nil
	if err := unix.Renameat2(ofd, oldName, nfd, newName, uint(in.Flags)); err != nil {
		return errno(err)
	}
	fs.mu.Lock()
	if n := fs.byKey[keyOf(&ost)]; n != nil && n.parent != nil {
		n.parent, n.name = ndir, newName
	}
	if in.Flags&unix.RENAME_EXCHANGE != 0 && haveNew {
		if n := fs.byKey[keyOf(&nst)]; n != nil && n.parent != nil {
			n.parent, n.name = odir, oldName
		}
	}
	fs.mu.Unlock()
	return fuse.OK
}

// Link implements fuse.RawFileSystem: a hard link, made by name in the old
// node's directory (linkat never follows a symlink without
// AT_SYMLINK_FOLLOW), checked to still be that node.
func (fs *fileSystem) Link(_ <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if fs.readOnly {
		return fuse.EROFS
	}
	old, s := fs.node(in.Oldnodeid)
	if !s.Ok() {
		return s
	}
	return fs.makeAt(in.NodeId, name, out, func(dfd int) error {
		return fs.atName(old, func(odfd int, oname string) error {
			return unix.Linkat(odfd, oname, dfd, name, 0)
		})
	})
}

// Readlink implements fuse.RawFileSystem.
func (fs *fileSystem) Readlink(_ <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	fd, st, _, s := fs.openID(h.NodeId, unix.O_PATH)
	if !s.Ok() {
		return nil, s
	}
	defer unix.Close(fd)
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return nil, fuse.EINVAL
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return nil, errno(err)
	}
	return buf[:n], fuse.OK
}

// StatFs implements fuse.RawFileSystem.
func (fs *fileSystem) StatFs(_ <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	var s unix.Statfs_t
	if err := fs.share.Statfs(&s); err != nil {
		return errno(err)
	}
	*out = fuse.StatfsOut{Blocks: s.Blocks, Bfree: s.Bfree, Bavail: s.Bavail, Files: s.Files, Ffree: s.Ffree,
		Bsize: uint32(s.Bsize), NameLen: uint32(s.Namelen), Frsize: uint32(s.Frsize)}
	return fuse.OK
}
