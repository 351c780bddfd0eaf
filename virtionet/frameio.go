package virtionet

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// frameIO is how frames cross between guest buffers and the backend. It is
// the only place that knows the mechanism; tx.go and rx.go hold all the
// virtqueue-side logic and see frames only as lists of iovecs into guest
// memory, vnet header first. newWorker picks one implementation for the
// worker's life (Linux vhost picks handle_tx_copy or handle_tx_zerocopy
// the same way; kvmtool has net_dev_operations {rx, tx}):
//
//	vectorIO  one readv or writev per frame (any fd; the tap's way)
//	mmsgIO    one recvmmsg or sendmmsg per group (a socket: af_packet)
//	uringIO   one io_uring_enter per group (a tap with IO=uring)
type frameIO interface {
	// name is what Stats reports: writev, sendmmsg or uring.
	name() IOMode
	// sendsBy is the system call send makes for a group of n frames (the
	// trace, and the tour's story, say it): uringIO sends one frame by writev.
	sendsBy(n int) IOMode
	// send writes frames in order and sets res[i] to the bytes frame i
	// took or a negative errno (that frame is dropped, the rest still go).
	// At resFull (EAGAIN: the backend has no room) it may stop and leave
	// the rest resNotSent: the worker waits for room and sends them again.
	// It returns the system calls it made. An error says the mechanism
	// itself failed: frames still marked resNotSent are to go another way.
	send(fd int, frames [][]unix.Iovec, res []int) (calls int, err error)
	// recv reads one frame into each slot, in order, as many as wait. For
	// the first n slots got[i] is the frame's length, or 0 or less where a
	// slot holds no frame (io_uring: a read that found the backend empty
	// while a later one found a frame). A frame longer than its slot
	// reports more than the slot holds. err says what ended the batch
	// early: unix.EAGAIN (nothing more waits), errBackendEOF, a read error,
	// or an ioFailure.
	recv(fd int, slots [][]unix.Iovec, got []int) (n, calls int, err error)
}

// resNotSent marks a frame that send has not handed to the backend.
const resNotSent = -1 << 31

// ioFailure is the mechanism failing (io_uring broken, or the backend
// refusing its requests), not a frame: the worker swaps to vectorIO.
type ioFailure struct{ err error }

func (e *ioFailure) Error() string { return e.err.Error() }

// isIOFailure reports whether err is an ioFailure. errors.AsType, not
// errors.As: the target errors.As needs escapes, and rxStopped, which
// sees an EAGAIN at the end of nearly every rx run, would allocate per run.
func isIOFailure(err error) bool {
	_, ok := errors.AsType[*ioFailure](err)
	return ok
}

// errBackendEOF: the backend's peer is gone (a read returned 0 bytes, or
// the tap's interface was deleted). It is not watched again: EOF stays
// readable and would spin the worker.
var errBackendEOF = errors.New("backend closed")

// readError maps a read's error to what recv reports.
func readError(err error) error {
	if errors.Is(err, unix.EBADFD) {
		return errBackendEOF
	}
	return err
}

// errnoResult is a failed write's result for send: a negative errno.
func errnoResult(err error) int {
	var e unix.Errno
	if errors.As(err, &e) {
		return -int(e)
	}
	return -int(unix.EIO)
}

// vectorIO moves one frame per readv or writev.
type vectorIO struct{}

func (vectorIO) name() IOMode { return IOWritev }

func (vectorIO) sendsBy(int) IOMode { return IOWritev }

func (vectorIO) send(fd int, frames [][]unix.Iovec, res []int) (int, error) {
	for i, f := range frames {
		n, err := writev(fd, f)
		if err != nil {
			n = errnoResult(err)
		}
		res[i] = n
		if n == resFull {
			return i + 1, nil // the backend is full: the rest wait with this one
		}
	}
	return len(frames), nil
}

func (vectorIO) recv(fd int, slots [][]unix.Iovec, got []int) (n, calls int, err error) {
	for n < len(slots) {
		calls++
		k, err := readv(fd, slots[n])
		if err != nil {
			return n, calls, readError(err)
		}
		if k == 0 {
			return n, calls, errBackendEOF
		}
		got[n] = k
		n++
	}
	return n, calls, nil
}

// iovecsLen is the number of bytes a list of iovecs holds.
func iovecsLen(iov []unix.Iovec) int {
	n := 0
	for _, v := range iov {
		n += int(v.Len)
	}
	return n
}

// iovecBytes is the memory an iovec points at (guest memory or a scratch
// buffer the worker owns).
func iovecBytes(v unix.Iovec) []byte { return unsafe.Slice(v.Base, int(v.Len)) }

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: (*byte)(unsafe.Pointer(unsafe.SliceData(b)))}
	v.SetLen(len(b))
	return v
}

// gather copies the first n bytes behind src into dst and returns them.
func gather(dst []byte, src []unix.Iovec, n int) []byte {
	dst = dst[:0]
	for _, v := range src {
		if len(dst) >= n {
			break
		}
		b := iovecBytes(v)
		dst = append(dst, b[:min(len(b), n-len(dst))]...)
	}
	return dst
}

// scatter copies b into the memory behind dst, from its start.
func scatter(dst []unix.Iovec, b []byte) {
	for _, v := range dst {
		if len(b) == 0 {
			return
		}
		b = b[copy(iovecBytes(v), b):]
	}
}
