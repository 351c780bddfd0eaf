package virtionet

import (
	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// txState is the worker's tx side.
type txState struct {
	txg       txStaged       // the tx chains of one send
	sinceLook int            // frames sent since the run last looked for waiting rx
	rxPollFd  [1]unix.PollFd // the backend, for rxWaiting
}

// maxIov is the kernel's limit on iovecs per readv/writev (UIO_MAXIOV).
const maxIov = 1024

// maxTxGroup bounds the chains sent with one frameIO.send.
const maxTxGroup = 64

// handleTx moves guest tx chains to the backend until the ring is empty or
// a budget is used up; it returns true when it should run again without a
// kick (requeue). Chains go out in groups of NotifyThreshold (one system
// call each where the frameIO batches); used entries are published after
// each group and at the end of the run.
func (w *worker) handleTx() (requeue bool) {
	q, c := w.q[txQueue], &w.p.counters[txQueue]
	thr := max(w.tuning.NotifyThreshold, 1)
	group := min(thr, maxTxGroup)
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
		k, b, empty, err := w.txGroup(limit, byteRoom)
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
			w.txBurst(pkts >= thr) // a look that found nothing tells nothing about the rate
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
// the ring ran empty, and the error of a guest that broke the queue.
func (w *worker) txGroup(limit, byteRoom int) (k, sent int, empty bool, err error) {
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
	return k, w.flushTx(), empty, err
}

// txStaged is the group of tx chains handed to one frameIO.send: each
// chain's head and frame length (-1: dropped, nothing to send) and its
// buffers (iovecs into guest memory, vnet header first).
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

func (g *txStaged) reset() {
	g.heads, g.lens, g.spans, g.iovs = g.heads[:0], g.lens[:0], g.spans[:0], g.iovs[:0]
	g.bytes, g.linear = 0, false
}

// stageTx checks a chain and adds it to the group, or as a counted drop.
// A chain of more buffers than one writev takes is copied into the
// scratch buffer; it returns false then: the group must go before another
// such chain can.
func (w *worker) stageTx(chain virtio.Chain) bool {
	g, c := &w.txg, &w.p.counters[txQueue]
	start, total := len(g.iovs), 0
	for _, d := range chain.Bufs {
		if d.Write {
			c.drop(DropTxWritable)
			g.iovs = g.iovs[:start]
			g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, -1)
			return true
		}
		total += int(d.Len)
	}
	switch {
	case total < w.hdrLen:
		c.drop(DropTxShort)
		g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, -1)
		return true
	case len(chain.Bufs) > maxIov:
		frame := w.scratchBuf()[:0]
		if total > cap(frame) {
			c.drop(DropTxTooBig)
			g.heads, g.lens = append(g.heads, chain.Head), append(g.lens, -1)
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
// refused, adds every chain used, and returns the frame bytes sent. If the
// frameIO fails as a whole, the worker goes on with one writev per frame,
// and the frames not sent go that way.
func (w *worker) flushTx() int {
	g, c, q := &w.txg, &w.p.counters[txQueue], w.q[txQueue]
	g.frames = g.frames[:0]
	for _, sp := range g.spans {
		g.frames = append(g.frames, g.iovs[sp[0]:sp[1]])
	}
	sent := 0
	if n := len(g.frames); n > 0 {
		if w.trace != nil {
			w.trace.event("tx", string(w.io.name()), "", n)
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
				}
			}
		}
	}
	f := 0 // the next frame's result
	for i, h := range g.heads {
		if l := g.lens[i]; l >= 0 {
			if g.res[f] < 0 {
				c.drop(DropTxWriteError)
			} else {
				c.frames.Add(1)
				c.bytes.Add(uint64(l))
				sent += l
				w.frameDone(txQueue, g.frames[f], l)
			}
			f++
		}
		q.AddUsed(h, 0)
	}
	g.reset()
	return sent
}

// scratchBuf holds the largest frame any backend delivers, plus one byte
// so that a truncated read shows.
func (w *worker) scratchBuf() []byte {
	if w.scratch == nil {
		w.scratch = make([]byte, 12+maxGSOFrame+1)
	}
	return w.scratch
}
