package virtionet

import (
	"golang.org/x/sys/unix"

	"tinyvmm/devices"
)

// maxTxGroup bounds the chains sent with one sendmmsg or io_uring_enter.
const maxTxGroup = 64

// txGroup is the tx chains staged for one sendmmsg or io_uring_enter:
// their heads, frame lengths and buffers (iovecs into guest memory, vnet
// header first).
type txGroup struct {
	heads []uint16
	lens  []int // without the vnet header
	spans [][2]int
	iovs  []unix.Iovec
	mm    []mmsghdr
	done  []bool // io_uring: the frame has its completion
	bytes int
}

// txBatches says whether tx chains go out in groups.
func (w *worker) txBatches() bool { return w.multiFrame || w.ring != nil }

// stageTx adds a chain to the group, or returns false for a chain that
// must go alone through transmit (to be dropped, or copied when it has more
// buffers than one message takes).
func (w *worker) stageTx(chain devices.Chain) bool {
	g := &w.txg
	if len(chain.Bufs) > maxIov {
		return false
	}
	start, total := len(g.iovs), 0
	for _, d := range chain.Bufs {
		if d.Write {
			g.iovs = g.iovs[:start]
			return false
		}
		if d.Len == 0 {
			continue
		}
		buf, _ := w.mem.Slice(d.Addr, uint64(d.Len)) // Pop checked it
		g.iovs = append(g.iovs, iovec(buf))
		total += len(buf)
	}
	if total < w.hdrLen {
		g.iovs = g.iovs[:start]
		return false
	}
	g.heads = append(g.heads, chain.Head)
	g.lens = append(g.lens, total-w.hdrLen)
	g.spans = append(g.spans, [2]int{start, len(g.iovs)})
	g.bytes += total - w.hdrLen
	return true
}

// flushTx sends the staged chains with sendmmsg (or through the ring),
// adds them used, and returns the frame bytes sent. A message the kernel
// refuses is a counted drop; the rest still go.
func (w *worker) flushTx() int {
	g, c := &w.txg, &w.d.counters[txQueue]
	n := len(g.heads)
	if n == 0 {
		return 0
	}
	if w.ring != nil {
		return w.flushTxRing()
	}
	if len(g.mm) < n {
		g.mm = make([]mmsghdr, maxTxGroup)
	}
	for i, sp := range g.spans {
		g.mm[i] = mmsghdr{}
		g.mm[i].hdr.Iov = &g.iovs[sp[0]]
		g.mm[i].hdr.SetIovlen(sp[1] - sp[0])
	}
	if w.trace != nil {
		w.trace.event("tx", "sendmmsg", "", n)
	}
	sent := 0
	for off := 0; off < n; {
		c.syscalls.Add(1)
		k, err := sendmmsg(w.fd, g.mm[off:n])
		if err != nil || k == 0 {
			c.drop(DropTxWriteError)
			off++
			continue
		}
		for _, l := range g.lens[off : off+k] {
			c.frames.Add(1)
			c.bytes.Add(uint64(l))
			sent += l
		}
		off += k
	}
	w.endTxGroup()
	return sent
}

// endTxGroup adds the group's chains used and empties it.
func (w *worker) endTxGroup() {
	g, q := &w.txg, w.q[txQueue]
	for _, h := range g.heads {
		q.AddUsed(h, 0)
	}
	g.heads, g.lens, g.spans, g.iovs, g.bytes = g.heads[:0], g.lens[:0], g.spans[:0], g.iovs[:0], 0
}
