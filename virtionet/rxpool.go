package virtionet

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// rxChain is one popped rx chain; its writable buffers are iovs[start:end]
// of the pool (Pop's own slice is only valid until the next Pop), and
// iovs[end] is the pool's overflow byte.
type rxChain struct {
	head       uint16
	start, end int
	capacity   int
}

// rxPool holds the rx chains popped during one batch. Frames consume them
// from the front, in order, so the unconsumed ones are always the last
// popped and Rewind can give them back.
type rxPool struct {
	iovs   []unix.Iovec // each chain's buffers, then one overflow byte
	chains []rxChain
	next   int    // first unconsumed chain
	over   []byte // the overflow byte: a frame that reaches it was too long
	want   int    // whole chains the next batch pops (see popWant)
}

// minRxPop is the fewest whole chains a batch pops. A batch pops twice as
// many chains as the last one filled, so a lone frame (a ping) costs a few
// pops and rewinds, not RxBatch of them, while a flood soon pops RxBatch.
const minRxPop = 4

// popWant is how many whole chains the next batch pops, at most limit.
func (p *rxPool) popWant(limit int) int { return min(limit, max(p.want, minRxPop)) }

func (p *rxPool) reset() {
	p.iovs, p.chains, p.next = p.iovs[:0], p.chains[:0], 0
	if p.over == nil {
		p.over = make([]byte, 1)
	}
}

// trim drops the last pooled chain (popped, then rewound).
func (p *rxPool) trim() {
	last := p.chains[len(p.chains)-1]
	p.iovs, p.chains = p.iovs[:last.start], p.chains[:len(p.chains)-1]
}

func (p *rxPool) unconsumed() int { return len(p.chains) - p.next }

// slot is chain i's buffers and the overflow byte: what a frame is read into.
func (p *rxPool) slot(i int) []unix.Iovec {
	ch := p.chains[i]
	return p.iovs[ch.start : ch.end+1]
}

// popRx pops one rx chain into the pool and checks it: only writable
// buffers, room at least for the vnet header (5.1.6.3.1).
func (w *worker) popRx() (bool, error) {
	p := &w.rx
	chain, ok, err := w.q[rxQueue].Pop()
	if err != nil || !ok {
		return false, err
	}
	rc := rxChain{head: chain.Head, start: len(p.iovs)}
	for _, d := range chain.Bufs {
		if !d.Write {
			p.iovs = p.iovs[:rc.start]
			return false, fmt.Errorf("%w from head %d has a device-readable buffer", errRxChain, chain.Head)
		}
		if d.Len > 0 {
			p.iovs = append(p.iovs, iovec(d.Buf))
			rc.capacity += int(d.Len)
		}
	}
	rc.end = len(p.iovs)
	p.iovs = append(p.iovs, iovec(p.over))
	if rc.capacity < w.hdrLen {
		p.iovs = p.iovs[:rc.start]
		return false, fmt.Errorf("%w from head %d has %d bytes, less than the %d-byte vnet header",
			errRxChain, chain.Head, rc.capacity, w.hdrLen)
	}
	p.chains = append(p.chains, rc)
	return true, nil
}

// completeChains hands the pool's next chains, which hold an n-byte frame,
// back to the guest, and fills in num_buffers (MRG_RXBUF's header).
func (w *worker) completeChains(n int) {
	p, q := &w.rx, w.q[rxQueue]
	first := p.chains[p.next]
	used := 0
	for rem := n; rem > 0 || used == 0; used++ {
		ch := p.chains[p.next+used]
		take := min(rem, ch.capacity)
		q.AddUsed(ch.head, uint32(take))
		rem -= take
	}
	if w.hdrLen == 12 {
		var nb [2]byte
		binary.LittleEndian.PutUint16(nb[:], uint16(used))
		writeAt(p.iovs[first.start:first.end], 10, nb[:])
	}
	p.next += used
}

// writeAt writes b at byte offset off of the memory behind iov.
func writeAt(iov []unix.Iovec, off int, b []byte) {
	for _, v := range iov {
		if len(b) == 0 {
			return
		}
		if off >= int(v.Len) {
			off -= int(v.Len)
			continue
		}
		k := copy(iovecBytes(v)[off:], b)
		b, off = b[k:], 0
	}
}
