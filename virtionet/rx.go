package virtionet

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

type rxResult int

const (
	rxBatchFull    rxResult = iota // RxBatch frames read; go on
	rxBudget                       // a weight is used up; requeue
	rxBackendEmpty                 // nothing more to read; wait for the backend
	rxNoBuffers                    // the guest has no room for a frame; wait for a kick
	rxBroken                       // the guest broke the queue
)

var (
	errRxChain = errors.New("rx chain")
	// errBackendEOF: the backend's peer is gone (a read returned 0 bytes).
	// It is not watched again: EOF stays readable and would spin the worker.
	errBackendEOF = errors.New("backend closed")
)

// handleRx moves frames from the backend into guest rx buffers, batch by
// batch, until the backend is empty, the guest is out of buffers or a
// budget is used up (then it returns true: run again without a kick).
func (w *worker) handleRx() (requeue bool) {
	q := w.q[rxQueue]
	q.DisableNotify()
	pkts, bytes := 0, 0
	for !w.stopping.Load() {
		switch w.rxBatch(&pkts, &bytes) {
		case rxBatchFull:
		case rxBudget:
			if w.trace != nil {
				w.trace.event("rx", "budget", "pkts", pkts, "bytes", bytes)
			}
			return true
		case rxBackendEmpty:
			if w.backendEOF {
				w.dropBackend()
			} else {
				w.watchTap(true)
			}
			return false
		case rxNoBuffers:
			w.d.counters[rxQueue].noBuffers.Add(1)
			if w.rxBuffersArrived() {
				q.DisableNotify()
				continue
			}
			w.watchTap(false)
			return false
		case rxBroken:
			return false
		}
	}
	return false
}

// rxBatch reads up to RxBatch frames, then publishes the used entries once
// and signals the guest at most once.
func (w *worker) rxBatch(pkts, bytes *int) rxResult {
	if w.multiFrame || w.ring != nil {
		if res, handled := w.rxBatchMulti(pkts, bytes); handled {
			return res
		}
	}
	q, c, p := w.q[rxQueue], &w.d.counters[rxQueue], &w.rx
	p.reset()
	frames, reads := 0, 0
	res := rxBatchFull
	for reads < max(w.tuning.RxBatch, 1) {
		capacity, err := w.gatherFrame()
		if err != nil {
			w.breakQueue(rxQueue, err)
			res = rxBroken
			break
		}
		if capacity < 0 {
			res = rxNoBuffers
			break
		}
		n, err := w.receive(capacity)
		if errors.Is(err, unix.EAGAIN) {
			res = rxBackendEmpty
			break
		}
		if errors.Is(err, errBackendEOF) {
			w.backendEOF = true
			res = rxBackendEmpty
			break
		}
		reads++
		if err != nil {
			c.drop(DropRxReadError)
			res = rxBackendEmpty // level-triggered epoll brings us back
			break
		}
		*pkts++ // a dropped frame was work too: it counts for the weight
		if n > 0 {
			frames++
			*bytes += n
		}
		if overWeight(c, *pkts, *bytes, w.tuning.RxWeightPkts, w.tuning.RxWeightBytes) {
			res = rxBudget
			break
		}
	}
	if k := p.unconsumed(); k > 0 && res != rxBroken {
		q.Rewind(uint16(k))
	}
	if frames > 0 {
		w.endRxBatch(frames)
	}
	return res
}

// rxBuffersArrived re-enables rx kicks and reports whether the driver added
// buffers beyond the ones that were too few for a frame. avail_event is set
// past those, or the driver, already beyond it, would never kick.
func (w *worker) rxBuffersArrived() bool {
	q := w.q[rxQueue]
	k := w.rx.unconsumed()
	q.AvailEventAhead = uint16(k)
	more := q.EnableNotify()
	q.AvailEventAhead = 0
	if k == 0 || !more {
		return more
	}
	n := 0
	for ; n <= k; n++ {
		if _, ok, err := q.Pop(); err != nil {
			q.Rewind(uint16(n))
			return true // the next Pop reports it
		} else if !ok {
			break
		}
	}
	q.Rewind(uint16(n))
	return n > k
}

// receive reads one frame into the gathered buffers (straight in when they
// can hold any frame, else through the scratch buffer), returns the used
// chains to the guest and gives the frame length without header (0 when
// it was dropped).
func (w *worker) receive(capacity int) (int, error) {
	c := &w.d.counters[rxQueue]
	var n int
	var err error
	direct := len(w.rxIov) > 0 && capacity >= w.maxFrame
	c.syscalls.Add(1)
	if direct {
		n, err = readv(w.fd, w.rxIov)
		if err == nil && n == capacity && capacity > w.maxFrame {
			c.drop(DropRxTooBig) // truncated: larger than the backend should deliver
			return 0, nil
		}
	} else {
		s := w.scratchBuf()
		w.iov = append(w.iov[:0], iovec(s))
		n, err = readv(w.fd, w.iov)
		if err == nil && (n > capacity || n == len(s)) {
			c.drop(DropRxTooBig)
			return 0, nil
		}
	}
	if errors.Is(err, unix.EBADFD) {
		return 0, errBackendEOF // the tap's interface was deleted
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errBackendEOF
	}
	if n < w.hdrLen {
		c.drop(DropRxReadError)
		return 0, nil
	}
	w.completeFrame(n, !direct)
	c.frames.Add(1)
	c.bytes.Add(uint64(n - w.hdrLen))
	return n - w.hdrLen, nil
}

// completeFrame hands the chains holding an n-byte frame back to the guest,
// copying it from scratch first if asked, and fills in num_buffers.
func (w *worker) completeFrame(n int, fromScratch bool) {
	p, q := &w.rx, w.q[rxQueue]
	first := p.chains[p.next]
	var src []byte
	if fromScratch {
		src = w.scratch[:n]
	}
	used := 0
	for rem := n; rem > 0 || used == 0; used++ {
		ch := p.chains[p.next+used]
		take := min(rem, ch.capacity)
		if fromScratch {
			w.scatter(ch, src[:take])
			src = src[take:]
		}
		q.AddUsed(ch.head, uint32(take))
		rem -= take
	}
	if w.hdrLen == 12 {
		var nb [2]byte
		binary.LittleEndian.PutUint16(nb[:], uint16(used))
		w.writeAt(first, 10, nb[:])
	}
	p.next += used
}

// scatter copies b into a chain's buffers from their start.
func (w *worker) scatter(ch rxChain, b []byte) {
	w.writeAt(ch, 0, b)
}

// writeAt writes b at byte offset off of a chain's buffers.
func (w *worker) writeAt(ch rxChain, off int, b []byte) {
	for _, d := range w.rx.descs[ch.start:ch.end] {
		if len(b) == 0 {
			return
		}
		if off >= int(d.Len) {
			off -= int(d.Len)
			continue
		}
		buf, _ := w.mem.Slice(d.Addr, uint64(d.Len))
		k := copy(buf[off:], b)
		b, off = b[k:], 0
	}
}

// endRxBatch closes one rx batch: the batch histogram, one used-index
// publish and at most one interrupt, whichever way the frames were read.
func (w *worker) endRxBatch(frames int) {
	w.d.counters[rxQueue].batch(frames)
	if w.trace != nil {
		w.trace.event("rx", "batch", "", frames)
	}
	w.publish(rxQueue)
}
