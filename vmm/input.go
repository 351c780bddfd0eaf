package vmm

import (
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/boot"
)

// inputFile is an open kernel or initrd: boot reads its headers, then maps
// each segment's whole pages and the initrd's over guest RAM (MapAt) and
// reads only the partial pages at their ends, so tinyvmm neither buffers
// nor copies the file. Until the guest writes a page, that page is the
// file's: replace a kernel or initrd by rename while a VM uses it (as
// make guest does), not by rewriting it in place.
type inputFile struct {
	*os.File
	size int64
}

func (f inputFile) Size() int64 { return f.size }

// MapAt implements boot.Mapper: the file's pages go over guest RAM
// copy-on-write (MAP_PRIVATE|MAP_FIXED), so the set-up copies nothing and
// the guest pulls in only the pages it touches; its writes stay private.
// boot passes only page-aligned whole pages of guest RAM. Should the map
// fail, the range is made anonymous memory again, as it was.
func (f inputFile) MapAt(dst []byte, off int64) error {
	addr, n := unsafe.Pointer(unsafe.SliceData(dst)), uintptr(len(dst))
	if uintptr(addr)%pageSize != 0 || n%pageSize != 0 || off%pageSize != 0 {
		return fmt.Errorf("map of %d bytes at file offset %#x: not whole pages", n, off)
	}
	_, err := unix.MmapPtr(int(f.Fd()), off, addr, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil {
		unix.MmapPtr(-1, 0, addr, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
		return err
	}
	return nil
}

// openInput opens what Config names for boot to read: data when the caller
// handed the image in memory, else the file at path. Something that cannot
// be read at offsets (a pipe) is read whole. close is never nil.
func openInput(path string, data []byte, what string) (f boot.File, close func(), err error) {
	nothing := func() {}
	if data != nil {
		return boot.Bytes(data), nothing, nil
	}
	if path == "" {
		return nil, nothing, nil
	}
	// Not os.Open: it offers each file to Go's netpoller, and the first
	// offer creates the epoll instance and its eventfd on the way to the
	// first KVM_RUN, only for epoll to refuse a regular file. A FIFO is then
	// read with blocking reads, which is all ReadAll needs.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	fh := os.NewFile(uintptr(fd), path)
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	switch {
	case st.Mode().IsRegular():
		return inputFile{fh, st.Size()}, func() { fh.Close() }, nil
	case st.IsDir():
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: is a directory", what, path)
	}
	defer fh.Close()
	b, err := io.ReadAll(fh)
	if err != nil {
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	return boot.Bytes(b), nothing, nil
}

// errText drops the "open PATH:" prefix Go puts on file errors, since the
// message already names the file.
func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
