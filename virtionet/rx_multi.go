package virtionet

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// rxBatchMulti is rxBatch for a MultiFramer backend (or a tap with
// IO=uring): it pops up to a batch of chains first (pre-parsed guest
// buffers), reads as many frames as wait with one recvmmsg (or one
// io_uring_enter), one frame per chain, then publishes once and signals
// once. handled is false when the next chain cannot hold a whole frame
// (small mergeable buffers): the caller then reads frame by frame.
func (w *worker) rxBatchMulti(pkts, bytes *int) (res rxResult, handled bool) {
	q, c, p := w.q[rxQueue], &w.d.counters[rxQueue], &w.rx
	p.reset()
	limit := max(w.tuning.RxBatch, 1)
	if wp := w.tuning.RxWeightPkts; wp > 0 {
		limit = max(min(limit, wp-*pkts), 1)
	}
	for len(p.chains) < limit {
		ok, err := w.popRx()
		if err != nil {
			w.breakQueue(rxQueue, err)
			return rxBroken, true
		}
		if !ok {
			break
		}
		if last := p.chains[len(p.chains)-1]; last.capacity < w.maxFrame || last.end-last.start > maxIov {
			q.Rewind(1)
			p.trim()
			if len(p.chains) == 0 {
				return 0, false
			}
			break
		}
	}
	if len(p.chains) == 0 {
		return rxNoBuffers, true
	}
	var n int
	var err error
	if w.ring != nil {
		n, err = w.readChains()
	} else {
		n, err = w.recvChains()
	}
	if (err == nil && (n == 0 || w.mm[0].len == 0)) || errors.Is(err, unix.EBADFD) {
		n, err = 0, errBackendEOF
	}
	frames := 0
	for i := 0; i < n; i++ {
		ch, got := p.chains[i], int(w.mm[i].len)
		*pkts++ // a dropped frame was work too: it counts for the weight
		if w.mm[i].hdr.Flags&unix.MSG_TRUNC != 0 || got < w.hdrLen || (got == ch.capacity && ch.capacity > w.maxFrame) {
			c.drop(DropRxTooBig)
			q.AddUsed(ch.head, 0) // the chain took the frame; the driver drops a short buffer
			continue
		}
		if w.hdrLen == 12 {
			var one [2]byte
			binary.LittleEndian.PutUint16(one[:], 1)
			w.writeAt(ch, 10, one[:])
		}
		q.AddUsed(ch.head, uint32(got))
		frames++
		*bytes += got - w.hdrLen
		c.frames.Add(1)
		c.bytes.Add(uint64(got - w.hdrLen))
	}
	p.next = n
	if k := p.unconsumed(); k > 0 {
		q.Rewind(uint16(k))
	}
	if n > 0 {
		w.endRxBatch(frames)
	}
	switch {
	case errors.Is(err, unix.EAGAIN):
		return rxBackendEmpty, true
	case errors.Is(err, errBackendEOF):
		w.backendEOF = true
		return rxBackendEmpty, true
	case err != nil:
		c.drop(DropRxReadError)
		return rxBackendEmpty, true
	case overWeight(c, *pkts, *bytes, w.tuning.RxWeightPkts, w.tuning.RxWeightBytes):
		return rxBudget, true
	case n < len(p.chains):
		return rxBackendEmpty, true // epoll says when more arrive
	}
	return rxBatchFull, true
}

// recvChains points one mmsghdr at each pooled chain's buffers and reads
// frames into them with one recvmmsg.
func (w *worker) recvChains() (int, error) {
	p := &w.rx
	if len(w.mm) < len(p.chains) {
		w.mm = make([]mmsghdr, len(p.chains))
	}
	for i, ch := range p.chains {
		w.mm[i] = mmsghdr{}
		w.mm[i].hdr.Iov = &p.iovs[ch.start]
		w.mm[i].hdr.SetIovlen(ch.end - ch.start)
	}
	w.d.counters[rxQueue].syscalls.Add(1)
	return recvmmsg(w.fd, w.mm[:len(p.chains)])
}
