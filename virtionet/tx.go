package virtionet

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/devices"
)

// maxIov is the kernel's limit on iovecs per readv/writev (UIO_MAXIOV).
const maxIov = 1024

// handleTx moves guest tx chains to the backend until the ring is empty or
// a budget is used up; it returns true when it should run again without a
// kick (requeue). Used entries are published every NotifyThreshold chains
// and at the end of the run. Chains go out in units: one chain per writev,
// or up to NotifyThreshold chains per sendmmsg (a MultiFramer backend) or
// per io_uring_enter (IO=uring).
func (w *worker) handleTx() (requeue bool) {
	q, c := w.q[txQueue], &w.d.counters[txQueue]
	thr := max(w.tuning.NotifyThreshold, 1)
	unit := 1
	if w.txBatches() {
		unit = min(thr, maxTxGroup)
	}
	q.DisableNotify()
	pkts, bytes, unpublished := 0, 0, 0
	publish := func() {
		if unpublished > 0 {
			w.publish(txQueue)
			unpublished = 0
		}
	}
	for {
		// With no weights, a guest that keeps adding would hold Reset off.
		if w.stopping.Load() {
			publish()
			return false
		}
		limit, byteRoom := unit, 0
		if wp := w.tuning.TxWeightPkts; wp > 0 {
			limit = min(limit, wp-pkts)
		}
		if wb := w.tuning.TxWeightBytes; wb > 0 {
			byteRoom = wb - bytes
		}
		k, b, empty, err := w.txUnit(limit, byteRoom)
		pkts, bytes, unpublished = pkts+k, bytes+b, unpublished+k
		if unpublished >= thr {
			publish()
		}
		if err != nil {
			publish()
			w.breakQueue(txQueue, err)
			return false
		}
		if k > 0 && overWeight(c, pkts, bytes, w.tuning.TxWeightPkts, w.tuning.TxWeightBytes) {
			publish()
			if w.trace != nil {
				w.trace.event("tx", "budget", "pkts", pkts, "bytes", bytes)
			}
			return true
		}
		if !empty {
			continue
		}
		publish()
		// In a burst, ask the driver to kick only every threshold chains,
		// and look again soon by ourselves; otherwise ask for a kick on
		// the next chain.
		burst := q.EventIdx && thr > 1 && pkts >= thr
		q.AvailEventAhead = 0
		if burst {
			q.AvailEventAhead = uint16(thr - 1)
		}
		if q.EnableNotify() {
			q.DisableNotify()
			continue
		}
		if burst {
			w.armPoll()
		}
		return false
	}
}

// txUnit moves up to limit chains to the backend, stopping early once
// byteRoom bytes (if above 0) are sent, and adds them used. It returns the
// chains taken, the frame bytes sent, whether the ring ran empty, and the
// error of a guest that broke the queue.
func (w *worker) txUnit(limit, byteRoom int) (k, b int, empty bool, err error) {
	q := w.q[txQueue]
	for k < limit {
		chain, ok, perr := q.Pop()
		if perr != nil {
			err = perr
			break
		}
		if !ok {
			empty = true
			break
		}
		if w.trace != nil {
			w.trace.event("tx", "pop", "head", chain.Head, "bufs", len(chain.Bufs))
		}
		k++
		if !w.txBatches() || !w.stageTx(chain) {
			b += w.flushTx() // keep the frames in order
			b += w.transmit(chain)
			q.AddUsed(chain.Head, 0)
		}
		if byteRoom > 0 && b+w.txg.bytes >= byteRoom {
			break
		}
	}
	b += w.flushTx()
	return k, b, empty, err
}

// transmit writes one chain's frame to the backend with one writev and
// returns its length without the vnet header (0 when it was dropped).
func (w *worker) transmit(chain devices.Chain) int {
	c := &w.d.counters[txQueue]
	w.iov = w.iov[:0]
	total := 0
	for _, b := range chain.Bufs {
		if b.Write {
			c.drop(DropTxWritable)
			return 0
		}
		if b.Len == 0 {
			continue
		}
		buf, _ := w.mem.Slice(b.Addr, uint64(b.Len)) // Pop checked it
		if len(w.iov) == maxIov {
			return w.transmitLinear(chain)
		}
		w.iov = append(w.iov, iovec(buf))
		total += len(buf)
	}
	if total < w.hdrLen {
		c.drop(DropTxShort)
		return 0
	}
	c.syscalls.Add(1)
	if _, err := writev(w.fd, w.iov); err != nil {
		c.drop(DropTxWriteError)
		return 0
	}
	c.frames.Add(1)
	c.bytes.Add(uint64(total - w.hdrLen))
	return total - w.hdrLen
}

// transmitLinear copies a chain of more than maxIov buffers into the
// scratch buffer and writes it from there.
func (w *worker) transmitLinear(chain devices.Chain) int {
	c := &w.d.counters[txQueue]
	frame := w.scratchBuf()[:0]
	for _, b := range chain.Bufs {
		buf, _ := w.mem.Slice(b.Addr, uint64(b.Len))
		if len(frame)+len(buf) > cap(frame) {
			c.drop(DropTxTooBig)
			return 0
		}
		frame = append(frame, buf...)
	}
	if len(frame) < w.hdrLen {
		c.drop(DropTxShort)
		return 0
	}
	w.iov = append(w.iov[:0], iovec(frame))
	c.syscalls.Add(1)
	if _, err := writev(w.fd, w.iov); err != nil {
		c.drop(DropTxWriteError)
		return 0
	}
	c.frames.Add(1)
	c.bytes.Add(uint64(len(frame) - w.hdrLen))
	return len(frame) - w.hdrLen
}

// scratchBuf holds the largest frame any backend delivers, plus one byte
// so that a truncated read shows.
func (w *worker) scratchBuf() []byte {
	if w.scratch == nil {
		w.scratch = make([]byte, 12+maxGSOFrame+1)
	}
	return w.scratch
}

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: (*byte)(unsafe.Pointer(unsafe.SliceData(b)))}
	v.SetLen(len(b))
	return v
}
