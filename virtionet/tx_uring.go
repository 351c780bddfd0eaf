package virtionet

import (
	"errors"

	"golang.org/x/sys/unix"
)

// errRingUnsupported: the backend's fd refuses non-waiting requests
// (-EOPNOTSUPP: no FMODE_NOWAIT, as on kernels whose tap lacks it), which
// the ring needs so that no request is parked.
var errRingUnsupported = errors.New("the backend takes no RWF_NOWAIT requests")

// flushTxRing sends the staged chains as one writev request each through
// the device's io_uring, with one io_uring_enter that waits for them all
// (a tap write does not wait, so they complete inside it). A failed
// request is a counted drop, as a failed writev is. If the ring itself
// fails, or the backend refuses its requests, the device goes back to one
// writev per frame for good, and the frames not sent go that way.
func (w *worker) flushTxRing() int {
	g, c := &w.txg, &w.d.counters[txQueue]
	n := len(g.heads)
	if w.trace != nil {
		w.trace.event("tx", "uring", "", n)
	}
	g.done = append(g.done[:0], make([]bool, n)...)
	queued := 0
	for i, sp := range g.spans {
		if !w.ring.Writev(w.fd, g.iovs[sp[0]:sp[1]], uint64(i)) {
			break
		}
		queued++
	}
	calls, err := w.ring.Submit(queued)
	c.syscalls.Add(uint64(calls))
	sent, unsupported := 0, false
	w.ring.Reap(func(i uint64, res int32) {
		if i >= uint64(n) || g.done[i] {
			return // not ours: cannot happen with a ring that waits for all
		}
		if res == -int32(unix.EOPNOTSUPP) {
			unsupported = true // left for writev below
			return
		}
		g.done[i] = true
		if res < 0 {
			c.drop(DropTxWriteError)
			return
		}
		c.frames.Add(1)
		c.bytes.Add(uint64(g.lens[i]))
		sent += g.lens[i]
	})
	if err == nil && unsupported {
		err = errRingUnsupported
	}
	if err != nil {
		w.dropRing(err)
	}
	for i, sp := range g.spans {
		if g.done[i] {
			continue
		}
		c.syscalls.Add(1)
		if _, err := writev(w.fd, g.iovs[sp[0]:sp[1]]); err != nil {
			c.drop(DropTxWriteError)
			continue
		}
		c.frames.Add(1)
		c.bytes.Add(uint64(g.lens[i]))
		sent += g.lens[i]
	}
	w.endTxGroup()
	return sent
}

// dropRing closes a ring that failed; the device goes on with writev.
func (w *worker) dropRing(err error) {
	d := w.d
	d.mu.Lock()
	first := d.ring != nil && d.ring == w.ring
	if first {
		d.ring.Close()
		d.ring = nil
	}
	d.mu.Unlock()
	w.ring = nil
	if first { // the other queue's worker may fail on the same ring: one notice
		d.cfg.Log("net %s: io_uring failed (%v); one writev per frame from now on", d.cfg.Tap, err)
	}
}
