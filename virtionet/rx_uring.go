package virtionet

import (
	"golang.org/x/sys/unix"
)

// minRxWave is the fewest reads an io_uring rx wave asks for.
const minRxWave = 4

// readChains is recvChains for a tap with IO=uring: READV requests into
// the pooled chains, in waves of one io_uring_enter each, until the chains
// are full or a read finds the tap empty (-EAGAIN). A read that finds
// nothing costs little but not nothing, so the first wave is as deep as
// the last batch was and each next one twice as deep. It returns, as
// recvmmsg does, how many chains got a frame (w.mm[i].len is each one's
// length) and the error that ended the batch.
func (w *worker) readChains() (int, error) {
	p, c := &w.rx, &w.d.counters[rxQueue]
	total := len(p.chains)
	if len(w.mm) < total {
		w.mm = make([]mmsghdr, total)
	}
	w.rxRes = append(w.rxRes[:0], make([]int32, total)...)
	n, wave := 0, w.rxWave
	var err error
	for n < total && err == nil {
		k := min(wave, total-n, w.ring.Entries())
		queued := 0
		for i := n; i < n+k; i++ {
			w.rxRes[i] = -int32(unix.ECANCELED) // until its completion says otherwise
			if w.ring.Readv(w.fd, p.iovs[p.chains[i].start:p.chains[i].end], uint64(i)) {
				queued++
			}
		}
		calls, serr := w.ring.Submit(queued)
		c.syscalls.Add(uint64(calls))
		w.ring.Reap(func(i uint64, res int32) {
			if i < uint64(total) {
				w.rxRes[i] = res
			}
		})
		if serr != nil {
			w.dropRing(serr) // the chains not read go back; readv from now on
			err = unix.EAGAIN
			break
		}
		got := w.compactRx(n, n+k)
		if n += got; got < k {
			switch r := w.rxRes[n]; {
			case r == -int32(unix.EOPNOTSUPP):
				w.dropRing(errRingUnsupported) // the rest go back; readv from now on
				err = unix.EAGAIN
			case r < 0:
				err = unix.Errno(-r)
			default:
				err = errBackendEOF // a read of 0 bytes
			}
		}
		wave *= 2
	}
	w.rxWave = max(n, minRxWave)
	for i := 0; i < n; i++ {
		w.mm[i].len, w.mm[i].hdr.Flags = uint32(w.rxRes[i]), 0
	}
	return n, err
}

// compactRx moves frames that landed after a failed read of the wave
// lo..hi (a frame that arrived between two reads) down next to the others,
// so that frames fill chains lo.. in order, and returns how many there
// are. The first result that is not a frame ends up just after them.
func (w *worker) compactRx(lo, hi int) int {
	p, res := &w.rx, w.rxRes
	n := lo
	for n < hi && res[n] > 0 {
		n++
	}
	for j := n + 1; j < hi; j++ {
		if res[j] <= 0 {
			continue
		}
		// Every pooled chain holds a whole frame (rxBatchMulti checks).
		frame, rem := w.scratchBuf()[:0], int(res[j])
		for _, d := range p.descs[p.chains[j].start:p.chains[j].end] {
			buf, _ := w.mem.Slice(d.Addr, uint64(d.Len))
			take := min(rem, len(buf))
			frame, rem = append(frame, buf[:take]...), rem-take
		}
		w.writeAt(p.chains[n], 0, frame)
		res[n], res[j] = res[j], res[n]
		n++
	}
	return n - lo
}
