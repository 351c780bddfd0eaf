package virtionet

import (
	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// txState is the worker's tx side.
type txState struct {
	txg       txStaged       // the tx chains of one send
	txFull    bool           // the backend was full: tx waits for it to be writable
	sinceLook int            // frames sent since the run last looked for waiting rx
	rxPollFd  [1]unix.PollFd // the backend, for rxWaiting
}

// maxIov is the kernel's limit on iovecs per readv/writev (UIO_MAXIOV).
const maxIov = 1024

// maxTxGroup bounds the chains sent with one frameIO.send:
// VHOST_NET_BATCH, as many as vhost-net hands the tap at once.
const maxTxGroup = 64

// handleTx moves guest tx chains to the backend until the ring is empty or
// a budget is used up; it returns true when it should run again without a
// kick (requeue). Chains go out in groups of up to TxYieldPkts (at most
// maxTxGroup; one system call each where the frameIO batches), with a
// look for waiting rx between groups; used entries are published after
// each group (or NotifyThreshold chains, where groups are smaller) and at
// the end of the run. The group is not the notify threshold: where every
// system call is dear (a nested L1), a group of the threshold's size held
// small frames at the rate of one write per frame, and vhost-net's batch
// moved far more (bench/RESULTS.md has the runs).
func (w *worker) handleTx() (requeue bool) {
	q, c := w.q[txQueue], &w.p.counters[txQueue]
	thr := max(w.tuning.NotifyThreshold, 1)
	group := maxTxGroup
	if y := w.tuning.TxYieldPkts; y > 0 {
		group = min(group, y)
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
		limit, byteRoom := group, 0
		if wp := w.tuning.TxWeightPkts; wp > 0 {
			limit = min(limit, wp-pkts)
		}
		if wb := w.tuning.TxWeightBytes; wb > 0 {
			byteRoom = wb - bytes
		}
		if limit, byteRoom = w.rateRoom(txQueue, limit, byteRoom); limit == 0 {
			publish()           // throttled: kicks stay off until the timer
			w.txPolling = false // the timer brings tx back, not the poll
			return false
		}
		k, b, empty, full, err := w.txGroup(limit, byteRoom)
		pkts, bytes, unpublished = pkts+k, bytes+b, unpublished+k
		if unpublished >= thr {
			publish()
		}
		if err != nil {
			publish()
			w.breakQueue(txQueue, err)
			return false
		}
		if full {
			// The chains the backend had no room for are back in the
			// ring; kicks stay off, and the backend's writability brings
			// tx back (vhost-net's tx poll on the socket).
			publish()
			if pkts > 0 {
				w.moved(txQueue, pkts)
				w.sawWork(txQueue, pkts)
			}
			w.txPolling = false
			return false
		}
		if k > 0 && overWeight(c, pkts, bytes, w.tuning.TxWeightPkts, w.tuning.TxWeightBytes) {
			publish()
			if w.trace != nil {
				w.trace.event("tx", "budget", "pkts", pkts, "bytes", bytes)
			}
			w.txBurst(true)
			w.moved(txQueue, pkts)
			w.sawWork(txQueue, pkts)
			return true
		}
		if !empty {
			if w.sinceLook += k; w.tuning.TxYieldPkts > 0 && w.sinceLook >= w.tuning.TxYieldPkts {
				w.sinceLook = 0
				if w.rxWaiting() {
					// rx first, then this run goes on without a kick.
					publish()
					w.enqueue(rxQueue)
					w.txBurst(true)
					w.moved(txQueue, pkts)
					w.sawWork(txQueue, pkts)
					c.rxYields.Add(1)
					return true
				}
			}
			continue
		}
		publish()
		if pkts > 0 {
			// A look that found nothing tells nothing about the rate.
			w.txBurst(pkts >= thr || w.tuning.WorkerBatchBytes > 0 && bytes >= w.tuning.WorkerBatchBytes)
			w.moved(txQueue, pkts)
			w.sawWork(txQueue, pkts)
		}
		// Busy polling (PollUs): kicks stay off; the run loop looks
		// again after a sched_yield, and turns them on once it is over.
		if w.txPolling = w.busyPolling(); w.txPolling {
			return false
		}
		// Without it: in a burst, ask the driver to kick only every
		// threshold chains, and look again soon by ourselves; otherwise
		// ask for a kick on the next chain.
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
			w.armPoll(burstPollNs)
		}
		return false
	}
}

// rxWaiting reports whether frames wait on the backend for a guest that
// has rx buffers: vhost lets a tx run go on to its budget (256 frames,
// seed 002) before rx has a turn; a tx run here gives rx its turn at its
// next look (every TxYieldPkts frames) instead, so a lone frame to the
// guest (a ping) does not wait behind a whole budget of a flood from it.
// A look is one poll system call.
func (w *worker) rxWaiting() bool {
	if !w.tapWatched || w.throttled[rxQueue] || w.broken[rxQueue] {
		return false
	}
	w.rxPollFd[0] = unix.PollFd{Fd: int32(w.fd), Events: unix.POLLIN}
	n, err := unix.Poll(w.rxPollFd[:], 0)
	return err == nil && n > 0 && w.rxPollFd[0].Revents&unix.POLLIN != 0
}

// txGroup pops up to limit chains, stopping early once byteRoom bytes (if
// above 0) are staged, sends their frames with one frameIO.send and adds
// them used. It returns the chains taken, the frame bytes sent, whether
// the ring ran empty, whether the backend was full (the chains from the
// first frame it refused on are given back to the ring, and the worker
// waits for it to take frames again), and the error of a guest that
// broke the queue.
func (w *worker) txGroup(limit, byteRoom int) (k, sent int, empty, full bool, err error) {
	q, g := w.q[txQueue], &w.txg
	g.reset()
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
		if !w.stageTx(chain) {
			break // a chain that went through scratch ends the group
		}
		if byteRoom > 0 && g.bytes >= byteRoom {
			break
		}
	}
	sent, held := w.flushTx()
	if held > 0 {
		w.q[txQueue].Rewind(uint16(held))
		w.waitWritable()
	}
	return k - held, sent, empty && held == 0, held > 0, err
}

// txStaged is the group of tx chains handed to one frameIO.send: each
// chain's head and frame length (below 0: dropped for a reason, dropLen,
// nothing to send) and its buffers (iovecs into guest memory, vnet header
// first).
type txStaged struct {
	heads  []uint16
	lens   []int
	spans  [][2]int // each sent frame's iovecs in iovs
	iovs   []unix.Iovec
	frames [][]unix.Iovec
	res    []int
	bytes  int
	linear bool // scratch holds a frame of this group
}

// dropLen is a staged chain's length for a drop: counted only once the
// chain is used, since a group the backend refuses in part is given back
// to the ring from that frame on and staged again later.
func dropLen(r DropReason) int { return -1 - int(r) }

func (g *txStaged) reset() {
	g.heads, g.lens, g.spans, g.iovs = g.heads[:0], g.lens[:0], g.spans[:0], g.iovs[:0]
	g.bytes, g.linear = 0, false
}

// stageTx checks a chain and adds it to the group, or as a counted drop.
// A chain of more buffers than one writev takes is copied into the
// scratch buffer; it returns false then: the group must go before another
// such chain can.
func (w *worker) stageTx(chain virtio.Chain) bool {
	g := &w.txg
	start, total := len(g.iovs), 0
	for _, d := range chain.Bufs {
		if d.Write {
			g.iovs = g.iovs[:start]
			g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, dropLen(DropTxWritable))
			return true
		}
		total += int(d.Len)
	}
	switch {
	case total < w.hdrLen:
		g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, dropLen(DropTxShort))
		return true
	case len(chain.Bufs) > maxIov:
		frame := w.scratchBuf()[:0]
		if total > cap(frame) {
			g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, dropLen(DropTxTooBig))
			return true
		}
		for _, d := range chain.Bufs {
			frame = append(frame, d.Buf...)
		}
		g.iovs = append(g.iovs, iovec(frame))
		g.linear = true
	default:
		for _, d := range chain.Bufs {
			if d.Len > 0 {
				g.iovs = append(g.iovs, iovec(d.Buf))
			}
		}
	}
	g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, total-w.hdrLen)
	g.spans = append(g.spans, [2]int{start, len(g.iovs)})
	g.bytes += total - w.hdrLen
	return !g.linear
}

// flushTx sends the group's frames, counts what went and what the backend
// refused, adds the chains used, and returns the frame bytes sent and how
// many chains, the group's last, it did not use: where the backend was
// full (EAGAIN) from one frame to the group's end, that frame's chain and
// those after it are held for the worker to give back to the ring, as
// vhost-net discards the descriptors of a send that found the socket full.
// If the frameIO fails as a whole, the worker goes on with one writev per
// frame, and the frames not sent go that way.
func (w *worker) flushTx() (sent, held int) {
	g, c, q := &w.txg, &w.p.counters[txQueue], w.q[txQueue]
	g.frames = g.frames[:0]
	for _, sp := range g.spans {
		g.frames = append(g.frames, g.iovs[sp[0]:sp[1]])
	}
	if n := len(g.frames); n > 0 {
		if w.trace != nil {
			w.trace.event("tx", string(w.io.sendsBy(n)), "", n)
		}
		g.res = g.res[:0]
		for range n {
			g.res = append(g.res, resNotSent)
		}
		calls, err := w.io.send(w.fd, g.frames, g.res)
		c.syscalls.Add(uint64(calls))
		if err != nil {
			w.fallBack(err)
			for i, r := range g.res {
				if r == resNotSent {
					calls, _ := w.io.send(w.fd, g.frames[i:i+1], g.res[i:i+1])
					c.syscalls.Add(uint64(calls))
					if g.res[i] == resFull {
						break // the rest wait with it
					}
				}
			}
		}
	}
	hold := w.holdFrom()
	f := 0 // the next frame's result
	// The group's frames and bytes are counted once, after it: two atomic
	// adds per frame were most of this loop's own CPU.
	var frames int
	for i, h := range g.heads {
		l := g.lens[i]
		if l >= 0 && f == hold {
			held = len(g.heads) - i
			c.backendFull.Add(1)
			if w.trace != nil {
				w.trace.event("tx", "backend full", "held", held)
			}
			break
		}
		switch {
		case l < 0:
			c.drop(DropReason(-1 - l))
		case g.res[f] < 0:
			c.drop(DropTxWriteError)
		default:
			frames++
			sent += l
			w.frameDone(txQueue, g.frames[f], l)
		}
		if l >= 0 {
			f++
		}
		q.AddUsed(h, 0)
	}
	if frames > 0 {
		c.frames.Add(uint64(frames))
		c.bytes.Add(uint64(sent))
		w.answered = true // a lone rx frame's answer, maybe (rx.go, loneRx)
	}
	g.reset()
	return sent, held
}

// resFull is a frame's result where the backend had no room for it.
const resFull = -int(unix.EAGAIN)

// holdFrom returns the first of the group's frames that the backend
// refused for want of room, with no frame after it sent, or -1. Frames go
// in order, so only such a tail can wait: a frame refused before one that
// went (io_uring's requests run side by side) is a drop. A backend whose
// peer is gone is never waited for.
func (w *worker) holdFrom() int {
	res, hold := w.txg.res, -1
	if len(w.txg.frames) == 0 || w.backendEOF {
		return -1
	}
	for i := len(res) - 1; i >= 0; i-- {
		switch res[i] {
		case resFull:
			hold = i
		case resNotSent:
		default:
			return hold
		}
	}
	return hold
}

// scratchBuf holds the largest frame any backend delivers, plus one byte
// so that a truncated read shows.
func (w *worker) scratchBuf() []byte {
	if w.scratch == nil {
		w.scratch = make([]byte, 12+maxGSOFrame+1)
	}
	return w.scratch
}
