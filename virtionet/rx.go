package virtionet

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// rxState is the worker's rx side: the chains and slots of one batch,
// the bounce buffer, whether the backend is watched, and rx interrupt
// moderation (RxIrqGapUs).
type rxState struct {
	rx        rxPool // the rx chains of one batch
	slots     [][]unix.Iovec
	got       []int
	gathered  []unix.Iovec // one frame's chains (MRG_RXBUF) and the overflow byte
	bounce    []byte       // a frame read before its chains are known
	bounceIov []unix.Iovec
	held      int // the bounce buffer holds a frame of this length, waiting for buffers
	guess     int // with MRG_RXBUF, the bytes of chains readEach lines up for the next frame

	tapWatched bool // the backend is in the epoll set
	backendEOF bool // the backend's peer closed: never watch it again

	// A lone frame's run reads no more (unprobed): the last rx run
	// that moved frames moved one small frame and nothing after it
	// (loneRx), and tx has moved frames since (answered), as in a
	// request/response turn or a ping. probeless is that decision for
	// the run under way, until its first read; justUnprobed says the
	// last run ended so, until the run loop's next epoll_wait has said
	// whether the backend was readable (then it was no lone frame).
	loneRx, answered, probeless, justUnprobed bool

	irqTimer  int       // rx interrupt moderation: fires when a held interrupt is due
	lastRxIrq time.Time // when the guest last got an rx interrupt
	rxIrqHeld bool      // an rx interrupt waits for irqTimer
}

type rxResult int

const (
	rxBatchFull    rxResult = iota // RxBatch frames read; go on
	rxBudget                       // a weight is used up; requeue
	rxBackendEmpty                 // nothing more to read; wait for the backend
	rxUnprobed                     // a lone frame read, and no read after it; epoll says if more wait
	rxNoBuffers                    // the guest has no room for a frame; wait for a kick
	rxBroken                       // the guest broke the queue
)

var errRxChain = errors.New("rx chain")

// handleRx moves frames from the backend into guest rx buffers, batch by
// batch, until the backend is empty, the guest is out of buffers or a
// budget is used up (then it returns true: run again without a kick).
func (w *worker) handleRx() (requeue bool) {
	q := w.q[rxQueue]
	q.DisableNotify()
	wasPolling := w.rxPolling
	w.rxPolling = false
	pkts, bytes := 0, 0
	w.probeless = w.loneRx && w.answered
	defer func() {
		w.probeless = false
		if pkts > 0 {
			w.answered = false
		}
	}()
	for !w.stopping.Load() {
		if w.rxThrottled() {
			return false
		}
		switch w.rxBatch(&pkts, &bytes) {
		case rxBatchFull:
		case rxBudget:
			w.loneRx = false
			w.rxBurst(true)
			w.sawWork(rxQueue, pkts)
			if w.trace != nil {
				w.trace.event("rx", "budget", "pkts", pkts, "bytes", bytes)
			}
			return true
		case rxBackendEmpty, rxUnprobed:
			if pkts > 0 { // a look that found nothing tells nothing about the rate
				w.rxBurst(pkts >= max(w.tuning.NotifyThreshold, 1) || bytes >= w.rxBurstBytes())
				w.loneRx = pkts == 1 && w.loneFrame(bytes)
			}
			w.sawWork(rxQueue, pkts) // nothing for a wake that found nothing
			if w.backendEOF {
				w.dropBackend()
			} else {
				w.watchBackend(true)
			}
			return false
		case rxNoBuffers:
			if pkts > 0 {
				w.loneRx = false
			}
			if !wasPolling {
				w.p.counters[rxQueue].noBuffers.Add(1)
			}
			// Busy polling (PollUs), as vhost's busyloop polls the rx
			// ring: the driver is giving buffers back, so rx kicks stay
			// off and the run loop looks again after a yield.
			w.sawWork(rxQueue, pkts)
			if w.rxPolling = w.busyPolling(); w.rxPolling {
				w.watchBackend(false)
				return false
			}
			if w.rxBuffersArrived() {
				q.DisableNotify()
				continue
			}
			w.watchBackend(false)
			return false
		case rxBroken:
			return false
		}
	}
	return false
}

// rxBatch reads up to RxBatch frames, then publishes the used entries once
// and signals the guest at most once. Chains that each hold any frame are
// read as a group, one frame per chain, with one frameIO.recv; otherwise
// (small mergeable buffers, or buffers smaller than a frame) frames are
// read one at a time into as many chains as a frame may need.
func (w *worker) rxBatch(pkts, bytes *int) rxResult {
	q, p := w.q[rxQueue], &w.rx
	p.reset()
	limit := max(w.tuning.RxBatch, 1)
	if wp := w.tuning.RxWeightPkts; wp > 0 {
		limit = max(min(limit, wp-*pkts), 1)
	}
	limit = w.rxRateLimit(limit)
	frames, res := 0, rxBatchFull
	whole, err := w.popWhole(p.popWant(limit))
	switch {
	case err != nil:
		w.breakQueue(rxQueue, err)
		return rxBroken
	case w.held > 0:
		w.probeless = false // a frame waited: no lone frame's run
		frames, res = w.deliverHeld(pkts, bytes)
		if res == rxBatchFull {
			var more int
			more, res = w.readEach(limit-1, pkts, bytes)
			frames += more
		}
	case whole > 0:
		frames, res = w.readWhole(0, pkts, bytes)
		for res == rxBatchFull && p.unconsumed() == 0 && len(p.chains) < limit {
			// Every chain took a frame: the backend may hold more.
			from := len(p.chains)
			if _, err := w.popWhole(limit); err != nil {
				w.breakQueue(rxQueue, err)
				res = rxBroken
				break
			}
			if len(p.chains) == from {
				break
			}
			var more int
			more, res = w.readWhole(from, pkts, bytes)
			frames += more
		}
		p.want = 2 * frames
	case len(p.chains) == 0:
		res = rxNoBuffers
	default:
		frames, res = w.readEach(limit, pkts, bytes)
	}
	if k := p.unconsumed(); k > 0 && res != rxBroken {
		q.Rewind(uint16(k))
	}
	if frames > 0 {
		w.p.counters[rxQueue].batch(frames)
		if w.trace != nil {
			w.trace.event("rx", "popped", "chains", len(p.chains)) // given back: those left over
			w.trace.event("rx", "batch", "", frames)
		}
		w.moved(rxQueue, frames)
		w.pollTxToo(*pkts) // before the guest sees the frames: it may answer at once
		w.publish(rxQueue)
	}
	return res
}

// popWhole pops chains that can each take any frame whole until the pool
// holds limit, and returns how many it holds. A chain that cannot is left
// in the pool when it is the first, and given back otherwise.
func (w *worker) popWhole(limit int) (int, error) {
	p := &w.rx
	for len(p.chains) < limit {
		ok, err := w.popRx()
		if err != nil || !ok {
			return len(p.chains), err
		}
		if ch := p.chains[len(p.chains)-1]; ch.capacity < w.maxFrame || ch.end-ch.start >= maxIov || w.held > 0 {
			if len(p.chains) == 1 {
				return 0, nil
			}
			w.q[rxQueue].Rewind(1)
			p.trim()
			break
		}
	}
	return len(p.chains), nil
}

// readWhole reads frames into the pooled chains from the from'th on, one
// each, with one frameIO.recv. A slot left without a frame, or with a
// frame that was dropped, is filled by moving the next frame down, so that
// frames take chains in order and the unused ones can be given back.
func (w *worker) readWhole(from int, pkts, bytes *int) (frames int, res rxResult) {
	p, c := &w.rx, &w.p.counters[rxQueue]
	chains := p.chains[from:]
	// recvmmsg reads what waits and finds the end in the same call:
	// nothing to save there.
	lone := w.probeless && len(chains) > 0 && w.io.name() != IOSendmmsg
	if lone {
		chains = chains[:1] // the rest are given back (rxBatch)
	}
	w.probeless = false
	w.slots = w.slots[:0]
	for i := range chains {
		w.slots = append(w.slots, p.slot(from+i))
	}
	w.got = w.got[:0]
	for range chains {
		w.got = append(w.got, 0)
	}
	n, calls, err := w.io.recv(w.fd, w.slots, w.got)
	c.syscalls.Add(uint64(calls))
	for i := 0; i < n; i++ {
		got := w.got[i]
		if got <= 0 {
			continue // no frame in this slot
		}
		*pkts++ // a dropped frame was work too: it counts for the weight
		if !w.frameFits(got, chains[i].capacity) {
			continue
		}
		if from+i != p.next {
			to := p.chains[p.next]
			scatter(p.iovs[to.start:to.end], gather(w.scratchBuf(), w.slots[i], got))
		}
		w.deliver(got, bytes, &frames)
	}
	switch {
	case err != nil:
		return frames, w.rxStopped(err)
	case overWeight(c, *pkts, *bytes, w.tuning.RxWeightPkts, w.tuning.RxWeightBytes):
		return frames, rxBudget
	case n < len(chains):
		return frames, rxBackendEmpty // epoll says when more arrive
	case lone && frames == 1 && w.loneFrame(*bytes):
		return frames, w.unprobed()
	}
	return frames, rxBatchFull
}

// readEach reads up to limit frames one at a time, each into the chains
// gatherFrame lines up for it: straight in where they can hold any frame,
// else through the bounce buffer.
func (w *worker) readEach(limit int, pkts, bytes *int) (frames int, res rxResult) {
	c := &w.p.counters[rxQueue]
	lone := w.probeless
	w.probeless = false
	for reads := 0; reads < limit; reads++ {
		if lone && reads == 1 && frames == 1 && w.loneFrame(*bytes) {
			return frames, w.unprobed()
		}
		need := w.maxFrame
		if w.mergeable {
			need = max(w.guess, 1)
		}
		capacity, direct, err := w.gatherFrame(need)
		if err != nil {
			w.breakQueue(rxQueue, err)
			return frames, rxBroken
		}
		if capacity < 0 {
			return frames, rxNoBuffers
		}
		slot := w.gathered
		spill := false
		switch {
		case !direct:
			slot = w.bounceSlot()
			capacity = min(capacity, len(w.bounce)-1)
		case w.mergeable && capacity < w.maxFrame:
			// Chains for the guessed size only; the rest of a longer
			// frame goes to the bounce buffer instead of the overflow byte.
			w.bounceSlot()
			slot[len(slot)-1] = iovec(w.bounce[:w.maxFrame+1-capacity])
			spill = true
		}
		w.slots = append(w.slots[:0], slot)
		w.got = append(w.got[:0], 0)
		n, calls, err := w.io.recv(w.fd, w.slots, w.got)
		c.syscalls.Add(uint64(calls))
		if n == 0 {
			return frames, w.rxStopped(err)
		}
		*pkts++
		got := w.got[0]
		if w.mergeable && got > 0 {
			w.guess = max(got, w.guess-w.guess/8)
		}
		switch {
		case !w.underMax(got):
			// Longer than any frame the guest may get: never held for
			// buffers, never delivered, whatever it posted.
		case spill && got > capacity:
			c.spills.Add(1)
			if res := w.deliverSpilled(got, capacity, bytes, &frames); res != rxBatchFull {
				return frames, res
			}
		case !direct && got <= len(w.bounce)-1 && got > capacity && w.mergeable:
			// Larger than the buffers the guest has now: hold it until
			// it adds more (a small ring may never line up a largest frame).
			w.held = got
			return frames, w.holdOrDrop()
		case !w.frameFits(got, capacity):
		case direct:
			w.deliver(got, bytes, &frames)
		default:
			w.scatterChains(w.bounce[:got])
			w.deliver(got, bytes, &frames)
		}
		if overWeight(c, *pkts, *bytes, w.tuning.RxWeightPkts, w.tuning.RxWeightBytes) {
			return frames, rxBudget
		}
		if err != nil {
			return frames, w.rxStopped(err)
		}
	}
	return frames, rxBatchFull
}

// deliverSpilled places a frame longer than the chains readEach lined up
// for it (capacity bytes): its tail is at the start of the bounce buffer.
// More chains take the tail; if the guest has too few, the frame is put
// together in the bounce buffer and held there (holdOrDrop), as one read
// into the bounce buffer would have been.
func (w *worker) deliverSpilled(got, capacity int, bytes, frames *int) rxResult {
	more, _, err := w.gatherFrame(got)
	switch {
	case err != nil:
		w.breakQueue(rxQueue, err)
		return rxBroken
	case more >= got:
		writeAt(w.gathered[:len(w.gathered)-1], capacity, w.bounce[:got-capacity])
		w.deliver(got, bytes, frames)
		return rxBatchFull
	}
	copy(w.bounce[capacity:got], w.bounce[:got-capacity])
	gather(w.bounce[:0], w.gathered[:len(w.gathered)-1], capacity)
	w.held = got
	return w.holdOrDrop()
}

// deliverHeld places the frame held in the bounce buffer once the guest
// has added enough buffers for it.
func (w *worker) deliverHeld(pkts, bytes *int) (frames int, res rxResult) {
	if !w.underMax(w.held) { // readEach holds none such; a frame is checked on every path
		w.held = 0
		return 0, rxBatchFull
	}
	capacity, _, err := w.gatherFrame(w.held)
	switch {
	case err != nil:
		w.breakQueue(rxQueue, err)
		return 0, rxBroken
	case capacity < w.held:
		return 0, w.holdOrDrop()
	}
	w.scatterChains(w.bounce[:w.held])
	w.deliver(w.held, bytes, &frames)
	w.held = 0
	return frames, rxBatchFull
}

// guestRefillSlack is how many rx descriptors a guest may leave unposted
// for good: Linux's virtio-net refills its rx ring only when more than
// min(NAPI budget 64, ring size)/2 descriptors are free (virtnet_receive),
// so a 64-entry ring may stay at 40 posted buffers however long the
// device waits.
func guestRefillSlack(ringSize int) int { return min(64, ringSize) / 2 }

// holdOrDrop keeps the held frame waiting for buffers while the guest may
// still post more: while more of its ring is unposted than it may leave
// so (guestRefillSlack), its driver refills once it has taken the used
// buffers, and kicks. Once the posted buffers cannot grow past that and
// are still too few, the frame is dropped and counted (issue 28, D1: it
// used to wait for the whole ring, which Linux may never post).
func (w *worker) holdOrDrop() rxResult {
	p := &w.rx
	size := int(w.q[rxQueue].Size)
	descs := len(p.iovs) - len(p.chains) // each chain's buffers plus one overflow byte
	if unposted := size - max(p.unconsumed(), descs); unposted > guestRefillSlack(size) {
		return rxNoBuffers
	}
	w.p.counters[rxQueue].drop(DropRxTooBig)
	w.held = 0
	return rxBatchFull
}

// underMax counts a frame longer than the largest the guest may get with
// its MTU and features (maxFrame): a backend whose MTU is larger (a tap,
// af_packet) can hand one over, and buffers that would hold it do not
// make it a frame the guest asked for (issue 28, D2).
func (w *worker) underMax(got int) bool {
	if got > w.maxFrame {
		w.p.counters[rxQueue].drop(DropRxTooBig)
		return false
	}
	return true
}

// frameFits counts a frame the guest cannot take: longer than the buffers
// read into (it reached the overflow byte) or than maxFrame, or shorter
// than a vnet header.
func (w *worker) frameFits(got, capacity int) bool {
	switch {
	case !w.underMax(got):
		return false
	case got > capacity:
		w.p.counters[rxQueue].drop(DropRxTooBig)
		return false
	case got < w.hdrLen:
		w.p.counters[rxQueue].drop(DropRxReadError)
		return false
	}
	return true
}

// deliver hands the pool's next chains, which now hold a got-byte frame,
// back to the guest and counts the frame.
func (w *worker) deliver(got int, bytes, frames *int) {
	c := &w.p.counters[rxQueue]
	w.rxFrameDone(got)
	w.completeChains(got)
	*frames++
	*bytes += got - w.hdrLen
	c.frames.Add(1)
	c.bytes.Add(uint64(got - w.hdrLen))
}

// loneFrame reports whether a run that moved one frame of bytes bytes
// (vnet header not counted) moved a lone frame: one of at most the MTU,
// the kind that comes alone (a request, an ACK, a ping), not a GSO frame
// of a stream, whose read costs far more than a read that finds nothing.
func (w *worker) loneFrame(bytes int) bool {
	return bytes > 0 && bytes <= mtuFrame(w.d.cfg.MTU)
}

// unprobed ends a lone frame's run without the read after it that would
// find the backend empty: the worker is about to wait in epoll_wait,
// where the backend stays watched (level-triggered) while the guest has
// buffers, so a frame that is there already wakes it at once, for the
// cost of that read. vhost-net peeks at its socket's queue in the
// kernel for nothing; a read that finds nothing is a system call here.
func (w *worker) unprobed() rxResult {
	w.justUnprobed = true
	w.p.counters[rxQueue].unprobed.Add(1)
	if w.trace != nil {
		w.trace.event("rx", "unprobed")
	}
	return rxUnprobed
}

// rxStopped turns what ended a recv early into the handler's next step.
func (w *worker) rxStopped(err error) rxResult {
	switch {
	case errors.Is(err, unix.EAGAIN):
	case errors.Is(err, errBackendEOF):
		w.backendEOF = true
	case isIOFailure(err):
		w.fallBack(err) // frames still waiting wake the worker again
	default:
		w.p.counters[rxQueue].drop(DropRxReadError) // level-triggered epoll brings us back
	}
	return rxBackendEmpty
}

// gatherFrame lines up the pool's chains, from the first unconsumed one,
// popping more, until they hold need bytes (just one chain without
// MRG_RXBUF). It returns their capacity, -1 when the guest has no buffers
// at all, and whether a frame can be read straight into them: w.gathered
// then holds their iovecs and the overflow byte.
func (w *worker) gatherFrame(need int) (capacity int, direct bool, err error) {
	p := &w.rx
	w.gathered = w.gathered[:0]
	i := p.next
	for ; ; i++ {
		if i == len(p.chains) {
			ok, err := w.popRx()
			if err != nil {
				return 0, false, err
			}
			if !ok {
				break
			}
		}
		ch := p.chains[i]
		capacity += ch.capacity
		w.gathered = append(w.gathered, p.iovs[ch.start:ch.end]...)
		if !w.mergeable || capacity >= need {
			break
		}
	}
	if i == p.next && i == len(p.chains) {
		return -1, false, nil
	}
	w.gathered = append(w.gathered, iovec(p.over))
	direct = len(w.gathered) <= maxIov && (capacity >= need || !w.mergeable)
	return capacity, direct, nil
}

// bounceSlot is the bounce buffer as one slot: it holds the largest frame
// any backend delivers, plus one byte so that a longer one shows.
func (w *worker) bounceSlot() []unix.Iovec {
	if w.bounce == nil {
		w.bounce = make([]byte, 12+maxGSOFrame+1)
		w.bounceIov = []unix.Iovec{iovec(w.bounce)}
	}
	return w.bounceIov
}

// scatterChains copies a frame into the pool's chains from the first
// unconsumed one on, each filled before the next.
func (w *worker) scatterChains(b []byte) {
	p := &w.rx
	for i := p.next; len(b) > 0 && i < len(p.chains); i++ {
		ch := p.chains[i]
		take := min(len(b), ch.capacity)
		scatter(p.iovs[ch.start:ch.end], b[:take])
		b = b[take:]
	}
}

// rxBuffersArrived re-enables rx kicks and reports whether the driver added
// buffers beyond the k it had, which were too few for a frame. avail_event
// goes just past what the device has seen (those k included: Rewind gave
// them back, but they are on the ring), so the next buffer added kicks.
func (w *worker) rxBuffersArrived() bool {
	q := w.q[rxQueue]
	k := w.rx.unconsumed()
	q.AvailEventAhead = 0
	more := q.EnableNotify()
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
