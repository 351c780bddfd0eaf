package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parts of <linux/io_uring.h> used here.
const (
	opReadv  = 1  // IORING_OP_READV
	opWritev = 2  // IORING_OP_WRITEV
	opWrite  = 23 // IORING_OP_WRITE

	rwfNowait = 0x8 // RWF_NOWAIT

	sqeFixedFile  = 1 << 0 // IOSQE_FIXED_FILE
	registerFiles = 2      // IORING_REGISTER_FILES
	registerProbe = 8      // IORING_REGISTER_PROBE
	opSupported   = 1 << 0 // IO_URING_OP_SUPPORTED

	featSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP
	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	offSQRing = 0          // IORING_OFF_SQ_RING
	offCQRing = 0x8000000  // IORING_OFF_CQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	rwFlags  uint32
	userData uint64
	_        [24]byte
}

// cqe is struct io_uring_cqe (16 bytes).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// Ring is one io_uring instance. It is not safe for concurrent use: one
// goroutine queues, submits and reaps.
type Ring struct {
	fd             int
	sqMap, cqMap   []byte
	sqeMap         []byte
	sqHead, sqTail *uint32
	sqMask         uint32
	sqes           []sqe
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []cqe
	tail           uint32 // our SQ tail: queued, not yet handed to the kernel
	fixed          int    // the fd registered as fixed file 0 (RegisterFile), or -1
	write          bool   // the kernel takes IORING_OP_WRITE (Linux 5.6 on)
}

// New sets up a ring with room for entries requests in flight (a power of
// two up to 4096). It fails, with the reason, where io_uring is missing or
// disabled (kernel.io_uring_disabled, seccomp).
func New(entries uint32) (*Ring, error) {
	var p params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &Ring{fd: int(fd), fixed: -1}
	if err := r.mmap(&p); err != nil {
		r.Close()
		return nil, err
	}
	r.write = r.supports(opWrite)
	return r, nil
}

// probe is struct io_uring_probe with room for the ops up to opWrite.
type probe struct {
	lastOp, opsLen uint8
	_              uint16
	_              [3]uint32
	ops            [opWrite + 1]struct {
		op, _ uint8
		flags uint16
		_     uint32
	}
}

// supports reports whether the kernel takes requests of opcode op
// (IORING_REGISTER_PROBE, Linux 5.6 on; before it, only the ops of 5.1
// and no IORING_OP_WRITE).
func (r *Ring) supports(op uint8) bool {
	var p probe
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerProbe,
		uintptr(unsafe.Pointer(&p)), uintptr(len(p.ops)), 0, 0)
	return e == 0 && op <= p.lastOp && int(op) < int(p.opsLen) && p.ops[op].flags&opSupported != 0
}

func (r *Ring) mmap(p *params) error {
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	if r.sqMap, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, flags); err != nil {
		return fmt.Errorf("io_uring: mmap sq ring: %w", err)
	}
	r.cqMap = r.sqMap
	if !single {
		if r.cqMap, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
			return fmt.Errorf("io_uring: mmap cq ring: %w", err)
		}
	}
	sqeBytes := int(p.sqEntries) * int(unsafe.Sizeof(sqe{}))
	if r.sqeMap, err = unix.Mmap(r.fd, offSQEs, sqeBytes, prot, flags); err != nil {
		return fmt.Errorf("io_uring: mmap sqes: %w", err)
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail = u32(r.sqMap, p.sqOff.head), u32(r.sqMap, p.sqOff.tail)
	r.sqMask = *u32(r.sqMap, p.sqOff.ringMask)
	r.cqHead, r.cqTail = u32(r.cqMap, p.cqOff.head), u32(r.cqMap, p.cqOff.tail)
	r.cqMask = *u32(r.cqMap, p.cqOff.ringMask)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMap[0])), p.sqEntries)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&r.cqMap[p.cqOff.cqes])), p.cqEntries)
	// Slot i of the SQ array always names SQE i: SQEs are used in ring order.
	array := unsafe.Slice(u32(r.sqMap, p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.tail = atomic.LoadUint32(r.sqTail)
	return nil
}

// Fd is the ring's file descriptor.
func (r *Ring) Fd() int { return r.fd }

// Entries is how many requests may be queued before a Submit.
func (r *Ring) Entries() int { return len(r.sqes) }

// RegisterFile makes fd the ring's fixed file: requests on fd then skip
// the file table lookup and the reference count taken and dropped per
// request (fget/fput; in the nested L1 about 4% of an rx worker's
// CPU). The ring holds its own reference to the file until Close, so fd
// must stay open, and not be reused for another file, as long as the
// ring is in use.
func (r *Ring) RegisterFile(fd int) error {
	fds := []int32{int32(fd)}
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerFiles,
		uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0)
	if e != 0 {
		return fmt.Errorf("io_uring_register files: %w", e)
	}
	r.fixed = fd
	return nil
}

// Readv queues a readv of fd into iov; it returns false when the ring is
// full. It never waits for data (RWF_NOWAIT): where none is there it
// completes with -EAGAIN. Without that flag io_uring would park the read
// until the fd turns readable, O_NONBLOCK or not, and Submit would wait
// for it. iov and the memory it points to must stay in place (heap or
// mmap, not a stack array) until Submit has returned.
func (r *Ring) Readv(fd int, iov []unix.Iovec, userData uint64) bool {
	return r.queue(opReadv, rwfNowait, fd, iov, userData)
}

// Writev queues a writev of iov to fd, like Readv: it never waits for
// room either (a full socket answers -EAGAIN; a tap has room, it drops
// what it cannot queue).
func (r *Ring) Writev(fd int, iov []unix.Iovec, userData uint64) bool {
	return r.queue(opWritev, rwfNowait, fd, iov, userData)
}

// Write queues a write of the bytes behind iov to fd, like Writev, but a
// frame in one buffer (a guest's usual tx chain: vnet header and frame in
// one descriptor) goes as IORING_OP_WRITE of that buffer: the kernel then
// has no iovec array to copy in and import per request, which a WRITEV of
// one iovec costs (about 2% of a tx worker's CPU per 64-byte frame at
// device level, bench/RESULTS.md). Only the buffer needs to stay in
// place until Submit has returned. Where the kernel lacks IORING_OP_WRITE
// (before Linux 5.6), every frame goes as WRITEV.
func (r *Ring) Write(fd int, iov []unix.Iovec, userData uint64) bool {
	if len(iov) != 1 || !r.write {
		return r.Writev(fd, iov, userData)
	}
	return r.queueAt(opWrite, rwfNowait, fd, uint64(uintptr(unsafe.Pointer(iov[0].Base))), uint32(iov[0].Len), userData)
}

func (r *Ring) queue(op uint8, rwFlags uint32, fd int, iov []unix.Iovec, userData uint64) bool {
	if len(iov) == 0 {
		return false
	}
	return r.queueAt(op, rwFlags, fd, uint64(uintptr(unsafe.Pointer(&iov[0]))), uint32(len(iov)), userData)
}

// queueAt queues one request with the SQE's addr and len: an iovec array
// and its length for READV and WRITEV, a buffer and its bytes for WRITE.
func (r *Ring) queueAt(op uint8, rwFlags uint32, fd int, addr uint64, n uint32, userData uint64) bool {
	if r.tail-atomic.LoadUint32(r.sqHead) >= uint32(len(r.sqes)) {
		return false
	}
	var flags uint8
	if fd == r.fixed {
		fd, flags = 0, sqeFixedFile // index 0 of the registered files
	}
	r.sqes[r.tail&r.sqMask] = sqe{
		opcode: op, flags: flags, fd: int32(fd),
		off:  ^uint64(0), // -1: the file's own position; a tap has none
		addr: addr, len: n,
		rwFlags: rwFlags, userData: userData,
	}
	r.tail++
	return true
}

// Queued is how many requests wait for Submit.
func (r *Ring) Queued() int { return int(r.tail - atomic.LoadUint32(r.sqHead)) }

// errNoProgress: the kernel took none of the requests and gave no error.
var errNoProgress = errors.New("io_uring_enter submitted nothing")

// Submit hands the queued requests to the kernel and waits until at least
// wait completions are ready, with as few io_uring_enter calls as it can
// (one, unless a signal interrupts it). It returns how many
// io_uring_enter calls it made. On an error, requests the kernel did not
// take are discarded: they get no completion.
func (r *Ring) Submit(wait int) (calls int, err error) {
	atomic.StoreUint32(r.sqTail, r.tail)
	for {
		toSubmit := r.tail - atomic.LoadUint32(r.sqHead)
		ready := int(atomic.LoadUint32(r.cqTail) - atomic.LoadUint32(r.cqHead))
		if toSubmit == 0 && ready >= wait {
			return calls, nil
		}
		var flags, minComplete uintptr
		if ready < wait {
			flags, minComplete = enterGetEvents, uintptr(wait)
		}
		n, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), minComplete, flags, 0, 0)
		calls++
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			r.discard()
			return calls, fmt.Errorf("io_uring_enter: %w", e)
		}
		if n == 0 && toSubmit > 0 {
			r.discard()
			return calls, errNoProgress
		}
	}
}

// discard forgets the requests the kernel has not taken. Without SQPOLL
// the kernel reads the SQ tail only inside io_uring_enter, so lowering it
// is safe.
func (r *Ring) discard() {
	r.tail = atomic.LoadUint32(r.sqHead)
	atomic.StoreUint32(r.sqTail, r.tail)
}

// Reap calls f for each completion ready (res is the byte count, or
// -errno) and returns how many there were.
func (r *Ring) Reap(f func(userData uint64, res int32)) int {
	head, tail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
	for i := head; i != tail; i++ {
		c := &r.cqes[i&r.cqMask]
		f(c.userData, c.res)
	}
	atomic.StoreUint32(r.cqHead, tail)
	return int(tail - head)
}

// Close unmaps the rings and closes the ring's fd.
func (r *Ring) Close() error {
	if r.cqMap != nil && &r.cqMap[0] != &r.sqMap[0] {
		unix.Munmap(r.cqMap)
	}
	for _, m := range [][]byte{r.sqeMap, r.sqMap} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	r.sqeMap, r.cqMap, r.sqMap = nil, nil, nil
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}
