package device

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/virtionet/guestdrv"
)

// guestFlood has the guest send frame as fast as the device takes it,
// answering echo requests meanwhile, until stop is set. It runs on its own
// OS thread, like a vCPU. It returns the frames it queued.
func guestFlood(g *guestdrv.Guest, frame []byte, stop *atomic.Bool) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var sent uint64
	for !stop.Load() {
		n := 0
		for g.Queue(frame) {
			n++
		}
		if n > 0 {
			g.Kick()
			sent += uint64(n)
		}
		// Like Linux's xmit: with the ring full, sleep until 3/4 of it
		// is done (or rx arrives) instead of spinning.
		if g.Poll(nil) == 0 {
			g.WaitTxOrRx(time.Millisecond)
		}
	}
	return sent
}

// guestSink has the guest take frames until stop is set; it returns how
// many it received.
func guestSink(g *guestdrv.Guest, stop *atomic.Bool) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var got uint64
	for !stop.Load() {
		n := g.Poll(nil)
		got += uint64(n)
		if n == 0 {
			g.Wait(time.Millisecond)
		}
	}
	return got
}

// mmsghdr is struct mmsghdr for sendmmsg(2), which x/sys/unix lacks.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// hostFlood sends frames on the packet socket fd, one after the other
// round and round, batch frames per sendmmsg, until stop is set; it
// returns the frames the kernel took.
func hostFlood(fd int, frames [][]byte, stop *atomic.Bool) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const batch = 32
	iovs := make([]unix.Iovec, len(frames))
	for i, f := range frames {
		iovs[i].Base = &f[0]
		iovs[i].SetLen(len(f))
	}
	var msgs [batch]mmsghdr
	for i := range msgs {
		msgs[i].hdr.Iov = &iovs[i%len(iovs)]
		msgs[i].hdr.SetIovlen(1)
	}
	var sent uint64
	for !stop.Load() {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), batch, 0, 0, 0)
		if e == 0 {
			sent += uint64(n)
		} else if e == unix.ENOBUFS || e == unix.EAGAIN {
			runtime.Gosched()
		} else if e != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(frames)
	runtime.KeepAlive(iovs)
	return sent
}
