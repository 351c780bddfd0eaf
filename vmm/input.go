package vmm

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"tinyvmm/boot"
)

// inputFile is an open kernel or initrd, a regular file: boot reads its
// headers, then reads each segment and the initrd straight into guest RAM
// at their offsets, so tinyvmm keeps no other copy of the file. Copied, not
// mapped: a file rewritten or truncated under a running VM (make guest
// rebuilding it) changes nothing the guest sees, and cannot make the VMM's
// own access to guest RAM fault (SIGBUS past the end of a truncated map).
// The copy costs about a millisecond for the default guest's kernel and
// initrd, and those pages are read by the guest during boot anyway.
type inputFile struct {
	*os.File
	size int64
}

func (f inputFile) Size() int64 { return f.size }

// openInput opens what Config names for boot to read: data when the caller
// handed the image in memory, else the file at path, which must be a
// regular file of at most limit bytes (the guest's memory). Anything else
// is refused before a byte is read: a device such as /dev/zero would be
// read without end, and a FIFO waits for a writer that may never come.
// close is never nil.
func openInput(path string, data []byte, what string, limit uint64) (f boot.File, close func(), err error) {
	nothing := func() {}
	if data != nil {
		if err := checkInputSize(uint64(len(data)), limit, what, "in memory"); err != nil {
			return nil, nothing, err
		}
		return boot.Bytes(data), nothing, nil
	}
	if path == "" {
		return nil, nothing, nil
	}
	// Not os.Open: it offers each file to Go's netpoller, and the first
	// offer creates the epoll instance and its eventfd on the way to the
	// first KVM_RUN, only for epoll to refuse a regular file. O_NONBLOCK:
	// opening a FIFO with no writer returns at once instead of waiting
	// for one; O_NOCTTY: a terminal named by mistake stays no controlling
	// one. Both are moot for the regular file that is all that is kept.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	fh := os.NewFile(uintptr(fd), path)
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: %s", what, path, notRegular(st.Mode()))
	}
	if err := checkInputSize(uint64(st.Size()), limit, what, path); err != nil {
		fh.Close()
		return nil, nothing, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, err)
	}
	return inputFile{fh, st.Size()}, func() { fh.Close() }, nil
}

// checkInputSize refuses a kernel or initrd larger than the guest's memory
// before anything is read or allocated for it.
func checkInputSize(n, limit uint64, what, where string) error {
	if n > limit {
		return fmt.Errorf("%s %s (%d MiB) does not fit in %d MiB of guest memory; raise --mem", what, where, (n+(1<<20)-1)>>20, limit>>20)
	}
	return nil
}

// notRegular says what a kernel or initrd that is not a regular file is.
func notRegular(mode os.FileMode) string {
	switch {
	case mode.IsDir():
		return "is a directory"
	case mode&os.ModeCharDevice != 0:
		return "is a character device, not a regular file"
	case mode&os.ModeDevice != 0:
		return "is a block device, not a regular file"
	case mode&os.ModeNamedPipe != 0:
		return "is a FIFO, not a regular file"
	case mode&os.ModeSocket != 0:
		return "is a socket, not a regular file"
	}
	return "is not a regular file"
}

// errText drops the "open PATH:" prefix Go puts on file errors, since the
// message already names the file.
func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
