package virtionet

import (
	"fmt"

	"golang.org/x/sys/unix"

	"tinyvmm/devices"
)

// rxChain is one popped rx chain; its writable buffers are descs[start:end]
// of the pool (Pop's own slice is only valid until the next Pop).
type rxChain struct {
	head       uint16
	start, end int
	capacity   int
}

// rxPool holds the rx chains popped during one batch. Frames consume them
// from the front, in order, so the unconsumed ones are always the last
// popped and Rewind can give them back.
type rxPool struct {
	descs  []devices.Desc
	iovs   []unix.Iovec // the same buffers, ready for readv/recvmmsg
	chains []rxChain
	next   int // first unconsumed chain
}

func (p *rxPool) reset() {
	p.descs, p.iovs, p.chains, p.next = p.descs[:0], p.iovs[:0], p.chains[:0], 0
}

// trim drops the last pooled chain (popped, then rewound).
func (p *rxPool) trim() {
	last := p.chains[len(p.chains)-1]
	p.descs, p.iovs, p.chains = p.descs[:last.start], p.iovs[:last.start], p.chains[:len(p.chains)-1]
}

func (p *rxPool) unconsumed() int { return len(p.chains) - p.next }

// gatherFrame lines up guest buffers for the next frame in w.rxIov, from
// the pool's unconsumed chains and new pops: one chain, or with MRG_RXBUF
// as many as a largest frame needs. Pooled chains are contiguous, so
// w.rxIov is a window on the pool's iovecs, not a copy. It returns their
// capacity, -1 when the guest has too few buffers, or an error when it
// broke the rules.
func (w *worker) gatherFrame() (int, error) {
	p := &w.rx
	w.rxIov = nil
	capacity := 0
	first := -1
	for i := p.next; ; i++ {
		if i == len(p.chains) {
			ok, err := w.popRx()
			if err != nil {
				return 0, err
			}
			if !ok {
				return -1, nil
			}
		}
		ch := p.chains[i]
		if first < 0 {
			first = ch.start
		}
		if ch.end-first > maxIov {
			if i == p.next {
				return ch.capacity, nil // no iovecs: receive copies
			}
			break
		}
		w.rxIov = p.iovs[first:ch.end]
		capacity += ch.capacity
		if !w.mergeable || capacity >= w.maxFrame {
			break
		}
	}
	return capacity, nil
}

// popRx pops one rx chain into the pool and checks it: only writable
// buffers, room at least for the vnet header (5.1.6.3.1).
func (w *worker) popRx() (bool, error) {
	p := &w.rx
	chain, ok, err := w.q[rxQueue].Pop()
	if err != nil || !ok {
		return false, err
	}
	rc := rxChain{head: chain.Head, start: len(p.descs)}
	for _, d := range chain.Bufs {
		if !d.Write {
			return false, fmt.Errorf("%w from head %d has a device-readable buffer", errRxChain, chain.Head)
		}
		if d.Len > 0 {
			buf, _ := w.mem.Slice(d.Addr, uint64(d.Len)) // Pop checked it
			p.descs = append(p.descs, d)
			p.iovs = append(p.iovs, iovec(buf))
			rc.capacity += int(d.Len)
		}
	}
	rc.end = len(p.descs)
	if rc.capacity < w.hdrLen {
		p.descs, p.iovs = p.descs[:rc.start], p.iovs[:rc.start]
		return false, fmt.Errorf("%w from head %d has %d bytes, less than the %d-byte vnet header",
			errRxChain, chain.Head, rc.capacity, w.hdrLen)
	}
	p.chains = append(p.chains, rc)
	return true, nil
}
