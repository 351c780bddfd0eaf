package virtionet

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/uring"
)

// minRxWave is the fewest reads an io_uring rx wave asks for.
const minRxWave = 4

// errRingUnsupported: the backend's fd refuses non-waiting requests
// (-EOPNOTSUPP: no FMODE_NOWAIT, as on kernels whose tap lacks it), which
// the ring needs so that no request is parked.
var errRingUnsupported = errors.New("the backend takes no RWF_NOWAIT requests")

// uringIO moves a group of frames per io_uring_enter: one WRITEV or READV
// request per frame, each RWF_NOWAIT, so that none is parked and the enter
// returns with all of them done. The ring is the device's (Device.ring).
//
// A frame that comes alone goes by a plain writev or readv instead: an
// io_uring_enter costs more than one such call, and a ping or a
// request/response turn moves one frame at a time (in the nested L1, both
// lost to vhost-net by io_uring and not by readv and writev; bench/RESULTS.md).
// The ring is for groups: a send of two frames or more, and the reads of
// a batch once two frames in a row were waiting.
type uringIO struct {
	ring       *uring.Ring
	wave       int    // reads in the first rx wave of the next batch
	lone       bool   // the last recv found at most one frame: the next starts with readv
	plainCalls uint64 // readv and writev calls made for lone frames
}

func newUringIO(r *uring.Ring) *uringIO { return &uringIO{ring: r, wave: minRxWave, lone: true} }

func (*uringIO) name() IOMode { return IOUring }

func (*uringIO) sendsBy(n int) IOMode {
	if n == 1 {
		return IOWritev
	}
	return IOUring
}

func (u *uringIO) send(fd int, frames [][]unix.Iovec, res []int) (calls int, err error) {
	if u.sendsBy(len(frames)) == IOWritev {
		calls, err = vectorIO{}.send(fd, frames, res)
		u.plainCalls += uint64(calls)
		return calls, err
	}
	for start := 0; start < len(frames); {
		queued := 0
		for i := start; i < len(frames) && u.ring.Write(fd, frames[i], uint64(i)); i++ {
			queued++
		}
		c, serr := u.ring.Submit(queued)
		calls += c
		unsupported := false
		u.ring.Reap(func(i uint64, r int32) {
			switch {
			case i >= uint64(len(frames)):
			case r == -int32(unix.EOPNOTSUPP):
				unsupported = true // stays resNotSent: it goes another way
			default:
				res[i] = int(r)
			}
		})
		if serr == nil && unsupported {
			serr = errRingUnsupported
		}
		if serr != nil {
			return calls, &ioFailure{serr}
		}
		if queued == 0 {
			return calls, &ioFailure{errors.New("io_uring: a request did not fit an empty ring")}
		}
		start += queued
	}
	return calls, nil
}

// recv reads after a lone frame with readv, one frame and one more (which
// finds the backend empty when the frame came alone); when both slots take
// a frame, and otherwise from the start, it reads in waves of one
// io_uring_enter each until the slots are full or a read finds the backend
// empty. A read that finds nothing costs little but not nothing, so the
// first wave is as deep as the last recv read (twice that when it filled
// every slot: a batch that goes on into more slots goes on doubling), and
// each next one twice as deep.
func (u *uringIO) recv(fd int, slots [][]unix.Iovec, got []int) (n, calls int, err error) {
	frames := 0
	defer func() {
		u.lone = frames <= 1
		u.wave = max(frames, minRxWave)
		if frames > 0 && frames == len(slots) {
			u.wave = 2 * frames
		}
	}()
	if u.lone {
		k := min(2, len(slots))
		n, calls, err = vectorIO{}.recv(fd, slots[:k], got[:k])
		u.plainCalls += uint64(calls)
		frames = n
		if err != nil || n < k || n == len(slots) {
			return n, calls, err
		}
	}
	m, c, err := u.recvWaves(fd, slots[n:], got[n:])
	for _, g := range got[n : n+m] {
		if g > 0 {
			frames++
		}
	}
	return n + m, calls + c, err
}

// recvWaves reads into slots in waves of one io_uring_enter each, the
// first u.wave deep (recv).
func (u *uringIO) recvWaves(fd int, slots [][]unix.Iovec, got []int) (n, calls int, err error) {
	wave := u.wave
	for n < len(slots) {
		k := min(wave, len(slots)-n, u.ring.Entries())
		queued := 0
		for i := n; i < n+k; i++ {
			got[i] = -int(unix.ECANCELED) // until its completion says otherwise
			if u.ring.Readv(fd, slots[i], uint64(i)) {
				queued++
			}
		}
		c, serr := u.ring.Submit(queued)
		calls += c
		u.ring.Reap(func(i uint64, r int32) {
			if i < uint64(len(slots)) {
				got[i] = int(r)
			}
		})
		// The wave ends the batch at its first read without a frame; a
		// frame found by a later read of the same wave still counts.
		end, firstEmpty := n, -1
		for i := n; i < n+k; i++ {
			if got[i] > 0 {
				end = i + 1
			} else if firstEmpty < 0 {
				firstEmpty = i
			}
		}
		switch {
		case serr != nil:
			return end, calls, &ioFailure{serr}
		case firstEmpty < 0:
			n += k
			wave *= 2
			continue
		}
		switch r := got[firstEmpty]; {
		case r == -int(unix.EOPNOTSUPP):
			err = &ioFailure{errRingUnsupported}
		case r == 0:
			err = errBackendEOF
		case r == -int(unix.ECANCELED) && queued < k:
			err = &ioFailure{errors.New("io_uring: a request did not fit an empty ring")}
		default:
			err = readError(unix.Errno(-r))
		}
		return end, calls, err
	}
	return n, calls, nil
}

// probeNowait reads zero bytes from fd through the ring, so that a backend
// that refuses RWF_NOWAIT requests is found at open, with one notice, and
// not at the first frame. A tap refuses them (-EOPNOTSUPP) on kernels whose
// tun does not set FMODE_NOWAIT, Linux 6.1 (Debian 12) among them; where it
// takes them, a zero-length read returns 0 and takes no frame.
func probeNowait(r *uring.Ring, fd int) error {
	iov := make([]unix.Iovec, 1) // on the heap, as Readv wants; Len 0
	iov[0].Base = new(byte)
	if !r.Readv(fd, iov, 0) {
		return errors.New("io_uring: the probe did not fit the ring")
	}
	if _, err := r.Submit(1); err != nil {
		return err
	}
	var res int32
	r.Reap(func(_ uint64, v int32) { res = v })
	switch {
	case res == -int32(unix.EOPNOTSUPP):
		return errRingUnsupported
	case res < 0 && res != -int32(unix.EAGAIN):
		return fmt.Errorf("io_uring probe read: %w", unix.Errno(-res))
	}
	return nil
}
