package boot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// File is a kernel or initrd as Load reads it: headers into small buffers,
// segments and the initrd at their offsets straight into guest RAM (or
// mapped there, when the File is also a Mapper), so the VMM never holds a
// copy of the whole file. *os.File needs only a Size (vmm adds it);
// *bytes.Reader is one already.
type File interface {
	io.ReaderAt
	Size() int64
}

// Mapper is what a File may also do: map its bytes [off, off+len(dst))
// over dst copy-on-write instead of reading them, so loading costs no copy
// and the guest pulls each page in when it first touches it. Load calls it
// only for whole pages of guest RAM (dst and off page aligned), never for
// memory outside Layout.Low. An error fails the load.
type Mapper interface {
	MapAt(dst []byte, off int64) error
}

// Bytes is a File over b: tests, and a VMM handed the image in memory.
func Bytes(b []byte) File { return bytes.NewReader(b) }

// fileSize is f's size; a nil File is empty.
func fileSize(f File) uint64 {
	if f == nil {
		return 0
	}
	return uint64(max(f.Size(), 0))
}

// readAt fills dst from f at off. The caller has checked off+len(dst)
// against f's size, so a short read means the file shrank or lied about its
// size: the file is truncated.
func readAt(f File, dst []byte, off uint64, what string) error {
	if len(dst) == 0 {
		return nil
	}
	if off > 1<<62 {
		return fmt.Errorf("boot: %s is truncated: it ends before offset %#x", what, off)
	}
	n, err := f.ReadAt(dst, int64(off))
	switch {
	case n == len(dst):
		return nil
	case err == nil || errors.Is(err, io.EOF):
		return fmt.Errorf("boot: %s is truncated: %d bytes at %#x, %d read", what, len(dst), off, n)
	}
	return fmt.Errorf("boot: cannot read %s: %v", what, err)
}

// loadAt puts f's bytes at off into dst, guest RAM at guest physical
// address gpa: the whole pages mapped when f is a Mapper and the file
// offset and the address agree within a page, the partial pages at either
// end read.
func loadAt(f File, dst []byte, off, gpa uint64, what string) error {
	m, ok := f.(Mapper)
	if !ok || off%pageSize != gpa%pageSize || uint64(len(dst)) < pageSize {
		return readAt(f, dst, off, what)
	}
	n := uint64(len(dst))
	head := min((pageSize-gpa%pageSize)%pageSize, n)
	tail := (n - head) % pageSize
	body := n - head - tail
	if body == 0 || off > 1<<62 {
		return readAt(f, dst, off, what)
	}
	if err := m.MapAt(dst[head:head+body], int64(off+head)); err != nil {
		return fmt.Errorf("boot: cannot map %s: %v", what, err)
	}
	if err := readAt(f, dst[:head], off, what); err != nil {
		return err
	}
	return readAt(f, dst[head+body:], off+head+body, what)
}

// readHead reads up to n bytes from the start of f (fewer when f is smaller).
func readHead(f File, n uint64, what string) ([]byte, error) {
	b := make([]byte, min(n, fileSize(f)))
	if err := readAt(f, b, 0, what); err != nil {
		return nil, err
	}
	return b, nil
}
