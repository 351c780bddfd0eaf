package boot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// File is a kernel or initrd as Load reads it: headers into small buffers,
// segments and the initrd at their offsets straight into guest RAM, so the
// VMM never holds a second copy of the whole file. The bytes are copied,
// never mapped: what the guest sees cannot change when the file is
// rewritten or truncated later. *os.File needs only a Size (vmm adds it);
// *bytes.Reader is one already.
type File interface {
	io.ReaderAt
	Size() int64
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

// readHead reads up to n bytes from the start of f (fewer when f is smaller).
func readHead(f File, n uint64, what string) ([]byte, error) {
	b := make([]byte, min(n, fileSize(f)))
	if err := readAt(f, b, 0, what); err != nil {
		return nil, err
	}
	return b, nil
}
