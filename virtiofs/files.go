package virtiofs

import (
	"encoding/binary"
	"os"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"tinyvmm/sharefs"
)

// openFlags keeps what the guest may ask of an open file: the access mode,
// append, truncation and sync. Creation comes as CREATE, never here.
func openFlags(guest uint32) int {
	return int(guest) & (unix.O_ACCMODE | unix.O_APPEND | unix.O_TRUNC | unix.O_SYNC | unix.O_DSYNC)
}

func writes(flags int) bool {
	return flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0
}

// handle returns the open file fh, or nil.
func (fs *fileSystem) handle(fh uint64) *handle {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.handles[fh]
}

// addHandle keeps fd open as a handle and returns its number.
func (fs *fileSystem) addHandle(fd int, st *unix.Stat_t) (uint64, fuse.Status) {
	typ := st.Mode & unix.S_IFMT
	h := &handle{key: keyOf(st), dir: typ == unix.S_IFDIR, fifo: typ == unix.S_IFIFO}
	// A FIFO's fd is non-blocking, so os.File puts it in the poller: a
	// read waiting for a writer parks a goroutine, not a thread, and
	// closing the handle (RELEASE, or a reset) wakes it.
	h.f = os.NewFile(uintptr(fd), "")
	rc, err := h.f.SyscallConn()
	if err != nil {
		h.f.Close()
		return 0, errno(err)
	}
	h.rc = rc
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.handles) >= MaxHandles {
		h.f.Close()
		return 0, fuse.Status(unix.EMFILE)
	}
	fh := fs.nextFh
	fs.nextFh++
	fs.handles[fh] = h
	return fh, fuse.OK
}

// release closes the handle fh.
func (fs *fileSystem) release(fh uint64) {
	fs.mu.Lock()
	h := fs.handles[fh]
	delete(fs.handles, fh)
	fs.mu.Unlock()
	if h != nil {
		h.f.Close()
	}
}

// closeAll closes every handle (a reset): reads parked on a FIFO return.
func (fs *fileSystem) closeAll() {
	fs.mu.Lock()
	hs := fs.handles
	fs.handles = map[uint64]*handle{}
	fs.mu.Unlock()
	for _, h := range hs {
		h.f.Close()
	}
}

// control runs fn with the handle's fd held open (a concurrent RELEASE
// closes it only after fn returns).
func (h *handle) control(fn func(fd int) error) error {
	var err error
	if cerr := h.rc.Control(func(fd uintptr) { err = fn(int(fd)) }); cerr != nil {
		return unix.EBADF
	}
	return err
}

// Open implements fuse.RawFileSystem: regular files and FIFOs only,
// reopened from the checked inode.
func (fs *fileSystem) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	flags := openFlags(in.Flags)
	if fs.readOnly && writes(flags) {
		return fuse.EROFS
	}
	pfd, st, _, s := fs.openID(in.NodeId, unix.O_PATH)
	if !s.Ok() {
		return s
	}
	defer unix.Close(pfd)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFIFO:
		flags |= unix.O_NONBLOCK // opening must not wait for the other end
	case unix.S_IFDIR:
		return fuse.Status(unix.EISDIR)
	default:
		return fuse.EACCES // device nodes, sockets, symlinks
	}
	fd, err := sharefs.Reopen(pfd, flags)
	if err != nil {
		return errno(err)
	}
	fh, s := fs.addHandle(fd, &st)
	if !s.Ok() {
		return s
	}
	out.Fh = fh
	out.OpenFlags = fs.openOutFlags(st.Mode)
	return fuse.OK
}

func (fs *fileSystem) openOutFlags(mode uint32) uint32 {
	if mode&unix.S_IFMT == unix.S_IFIFO {
		return fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE
	}
	if fs.cache == CacheAlways {
		// The pages stay across opens; the guest drops them when an
		// attribute it fetches shows a new size or mtime
		// (FUSE_AUTO_INVAL_DATA, which go-fuse asks for).
		return fuse.FOPEN_KEEP_CACHE
	}
	// CacheAuto: the guest's page cache, dropped at each open, so an
	// open sees the host's file as it is then. Reads go through the
	// guest's readahead, large and several at once, where direct I/O
	// made each read(2) one request waited for; writes still go through
	// to the host at once (FUSE writes through unless the device asks
	// for the writeback cache, which it does not), and a shared
	// writable mmap works, which direct I/O refuses.
	return 0
}

// Create implements fuse.RawFileSystem: a new regular file, opened.
func (fs *fileSystem) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if fs.readOnly {
		return fuse.EROFS
	}
	dfd, dst, parent, s := fs.dir(in.NodeId, name)
	if !s.Ok() {
		return s
	}
	defer unix.Close(dfd)
	flags := openFlags(in.Flags)
	mode := safeMode(in.Mode, false)
	// O_EXCL always: a name that exists is opened the way OPEN does it,
	// never by an O_CREAT open that would open a FIFO or a device node.
	fd, err := sharefs.OpenAt(dfd, name, flags|unix.O_CREAT|unix.O_EXCL, mode)
	if err == unix.EEXIST && in.Flags&unix.O_EXCL == 0 {
		var entry fuse.EntryOut
		st, err := fs.stat(dfd, uint64(dst.Dev), name)
		if err != nil {
			return errno(err)
		}
		if s := fs.entry(parent, name, &st, &entry); !s.Ok() {
			return s
		}
		open := fuse.OpenIn{InHeader: in.InHeader, Flags: in.Flags}
		open.NodeId = entry.NodeId
		if s := fs.Open(nil, &open, &out.OpenOut); !s.Ok() {
			fs.Forget(entry.NodeId, 1)
			return s
		}
		out.EntryOut = entry
		return fuse.OK
	}
	if err != nil {
		return errno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return errno(err)
	}
	if st.Mode&0o7777 != mode {
		unix.Fchmod(fd, mode) // the host's umask narrowed it
		unix.Fstat(fd, &st)
	}
	if s := fs.entry(parent, name, &st, &out.EntryOut); !s.Ok() {
		unix.Close(fd)
		return s
	}
	fh, s := fs.addHandle(fd, &st)
	if !s.Ok() {
		fs.Forget(out.EntryOut.NodeId, 1)
		return s
	}
	out.Fh = fh
	out.OpenFlags = fs.openOutFlags(st.Mode)
	return fuse.OK
}

// readResult reads straight into the reply's buffers in guest memory.
type readResult struct {
	h    *handle
	off  int64
	size int
}

func (r *readResult) Size() int { return r.size }
func (r *readResult) Done()     {}

// Bytes is go-fuse's path without a scatter list.
func (r *readResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:min(len(buf), r.size)]
	n, s := r.Readv([][]byte{buf})
	return buf[:n], s
}

// Readv fills dst, up to the end of the file.
func (r *readResult) Readv(dst [][]byte) (int, fuse.Status) {
	total := 0
	if r.h.fifo {
		var err error
		rerr := r.h.rc.Read(func(fd uintptr) bool {
			total, err = unix.Readv(int(fd), dst)
			return err != unix.EAGAIN
		})
		if rerr != nil && err == nil {
			err = unix.EBADF
		}
		return max(total, 0), errno(err)
	}
	err := r.h.control(func(fd int) error {
		for len(dst) > 0 {
			n, err := unix.Preadv(fd, dst, r.off+int64(total))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			total += n
			for n > 0 && len(dst) > 0 {
				k := min(n, len(dst[0]))
				dst[0] = dst[0][k:]
				n -= k
				if len(dst[0]) == 0 {
					dst = dst[1:]
				}
			}
		}
		return nil
	})
	return total, errno(err)
}

// Read implements fuse.RawFileSystem: the data is read when the reply is
// written, into the guest's buffers (readResult.Readv).
func (fs *fileSystem) Read(_ <-chan struct{}, in *fuse.ReadIn, _ []byte) (fuse.ReadResult, fuse.Status) {
	h := fs.handle(in.Fh)
	if h == nil || h.dir {
		return nil, fuse.EBADF
	}
	if in.Offset > 1<<62 {
		return nil, fuse.EINVAL
	}
	return &readResult{h: h, off: int64(in.Offset), size: int(in.Size)}, fuse.OK
}

// Write implements fuse.RawFileSystem.
func (fs *fileSystem) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return fs.Writev(c, in, [][]byte{data})
}

// Writev implements fuse.RawFileSystem: straight from the guest's buffers.
func (fs *fileSystem) Writev(_ <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if fs.readOnly {
		return 0, fuse.EROFS
	}
	h := fs.handle(in.Fh)
	if h == nil || h.dir {
		return 0, fuse.EBADF
	}
	if in.Offset > 1<<62 {
		return 0, fuse.EINVAL
	}
	// No more than the request says, whatever the buffers hold.
	var iov [][]byte
	left := int(in.Size)
	for _, b := range data {
		if left == 0 {
			break
		}
		b = b[:min(len(b), left)]
		left -= len(b)
		iov = append(iov, b)
	}
	total := 0
	var err error
	if h.fifo {
		werr := h.rc.Write(func(fd uintptr) bool {
			total, err = unix.Writev(int(fd), iov)
			return err != unix.EAGAIN
		})
		if werr != nil && err == nil {
			err = unix.EBADF
		}
		return uint32(max(total, 0)), errno(err)
	}
	err = h.control(func(fd int) error {
		for len(iov) > 0 {
			n, err := unix.Pwritev(fd, iov, int64(in.Offset)+int64(total))
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return err
			}
			total += n
			for n > 0 && len(iov) > 0 {
				k := min(n, len(iov[0]))
				iov[0] = iov[0][k:]
				n -= k
				if len(iov[0]) == 0 {
					iov = iov[1:]
				}
			}
		}
		return nil
	})
	if total > 0 {
		err = nil // the guest learns of the rest at its next write
	}
	return uint32(total), errno(err)
}

// Release implements fuse.RawFileSystem.
func (fs *fileSystem) Release(_ <-chan struct{}, in *fuse.ReleaseIn) { fs.release(in.Fh) }

// ReleaseDir implements fuse.RawFileSystem.
func (fs *fileSystem) ReleaseDir(in *fuse.ReleaseIn) { fs.release(in.Fh) }

// Flush implements fuse.RawFileSystem: writes are not buffered here.
func (fs *fileSystem) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if fs.handle(in.Fh) == nil {
		return fuse.EBADF
	}
	return fuse.OK
}

// Fsync implements fuse.RawFileSystem.
func (fs *fileSystem) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	h := fs.handle(in.Fh)
	if h == nil {
		return fuse.EBADF
	}
	if fs.readOnly || h.fifo {
		return fuse.OK
	}
	return errno(h.control(func(fd int) error {
		if in.FsyncFlags&1 != 0 { // FUSE_FSYNC_FDATASYNC
			return unix.Fdatasync(fd)
		}
		return unix.Fsync(fd)
	}))
}

// FsyncDir implements fuse.RawFileSystem.
func (fs *fileSystem) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	h, done, s := fs.dirHandle(in.Fh, in.NodeId)
	if !s.Ok() {
		return s
	}
	defer done()
	if fs.readOnly {
		return fuse.OK
	}
	return errno(h.control(unix.Fsync))
}

// OpenDir implements fuse.RawFileSystem. Under CacheAlways it answers
// ENOSYS, which tells Linux to open directories on its own from then on
// (FUSE_NO_OPENDIR_SUPPORT): no OPENDIR and RELEASEDIR round trip for
// each directory a walk enters, and the listing kept across opens
// (Linux then opens with FOPEN_KEEP_CACHE|FOPEN_CACHE_DIR), until the
// directory's mtime moves. READDIR then comes with no handle.
func (fs *fileSystem) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if fs.cache == CacheAlways {
		return fuse.ENOSYS
	}
	fd, st, s := fs.openDir(in.NodeId)
	if !s.Ok() {
		return s
	}
	fh, s := fs.addHandle(fd, &st)
	if !s.Ok() {
		return s
	}
	out.Fh = fh
	return fuse.OK
}

// openDir opens the directory the guest calls id for reading.
func (fs *fileSystem) openDir(id uint64) (int, unix.Stat_t, fuse.Status) {
	pfd, st, _, s := fs.openID(id, unix.O_PATH|unix.O_DIRECTORY)
	if !s.Ok() {
		return -1, st, s
	}
	defer unix.Close(pfd)
	fd, err := sharefs.OpenAt(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, st, errno(err)
	}
	var dst unix.Stat_t
	if err := unix.Fstat(fd, &dst); err != nil || keyOf(&dst) != keyOf(&st) {
		unix.Close(fd)
		return -1, st, fuse.Status(unix.ESTALE)
	}
	return fd, st, fuse.OK
}

// dirHandle is the open directory of a READDIR or FSYNCDIR: the handle
// fh, or with no handle (after OpenDir's ENOSYS) the directory id opened
// for this request alone, which done closes.
func (fs *fileSystem) dirHandle(fh, id uint64) (h *handle, done func(), s fuse.Status) {
	if fh != 0 || fs.cache != CacheAlways {
		h = fs.handle(fh)
		if h == nil || !h.dir {
			return nil, nil, fuse.EBADF
		}
		return h, func() {}, fuse.OK
	}
	fd, st, s := fs.openDir(id)
	if !s.Ok() {
		return nil, nil, s
	}
	h = &handle{f: os.NewFile(uintptr(fd), ""), key: keyOf(&st), dir: true}
	rc, err := h.f.SyscallConn()
	if err != nil {
		h.f.Close()
		return nil, nil, errno(err)
	}
	h.rc = rc
	return h, func() { h.f.Close() }, fuse.OK
}

// ReadDir implements fuse.RawFileSystem.
func (fs *fileSystem) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return fs.readDir(in, out, false)
}

// ReadDirPlus implements fuse.RawFileSystem: each entry looked up too.
func (fs *fileSystem) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return fs.readDir(in, out, true)
}

// readDir lists the directory from the host's cookie in.Offset (the d_off
// of the last entry the guest got), as many entries as fit.
func (fs *fileSystem) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	h, done, s := fs.dirHandle(in.Fh, in.NodeId)
	if !s.Ok() {
		return s
	}
	defer done()
	if fs.isHidden(h.key) {
		return fuse.OK // empty
	}
	var parent *node
	if plus {
		fs.mu.Lock()
		parent = fs.byKey[h.key]
		fs.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf == nil {
		h.buf = make([]byte, 16<<10)
	}
	return errno(h.control(func(fd int) error {
		if _, err := unix.Seek(fd, int64(in.Offset), 0); err != nil {
			return err
		}
		var dst unix.Stat_t
		if err := unix.Fstat(fd, &dst); err != nil {
			return err
		}
		for {
			n, err := unix.Getdents(fd, h.buf)
			if err != nil || n <= 0 {
				return err
			}
			for b := h.buf[:n]; len(b) >= 19; {
				// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
				reclen := int(binary.NativeEndian.Uint16(b[16:]))
				if reclen < 19 || reclen > len(b) {
					return unix.EIO
				}
				name := b[19:reclen]
				for i, c := range name {
					if c == 0 {
						name = name[:i]
						break
					}
				}
				de := fuse.DirEntry{Ino: binary.NativeEndian.Uint64(b), Off: binary.NativeEndian.Uint64(b[8:]),
					Mode: uint32(b[18]) << 12, Name: string(name)}
				b = b[reclen:]
				if !plus {
					if !out.AddDirEntry(de) {
						return nil
					}
					continue
				}
				eo := out.AddDirLookupEntry(de)
				if eo == nil {
					return nil
				}
				if parent == nil || de.Name == "." || de.Name == ".." {
					continue // node 0: the guest looks it up itself if it needs to
				}
				st, err := fs.stat(fd, uint64(dst.Dev), de.Name)
				if err != nil {
					continue
				}
				if !fs.entry(parent, de.Name, &st, eo).Ok() {
					*eo = fuse.EntryOut{}
				}
			}
		}
	}))
}
