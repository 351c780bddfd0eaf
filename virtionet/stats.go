package virtionet

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
	"sync/atomic"
)

// DropReason says why a frame was not delivered.
type DropReason int

// Why frames are dropped; each has its own counter.
const (
	DropTxShort DropReason = iota
	DropTxTooBig
	DropTxWritable
	DropTxWriteError
	DropRxTooBig
	DropRxReadError
	numDropReasons
)

var dropReasonText = [numDropReasons]string{
	DropTxShort:      "tx frame shorter than the vnet header",
	DropTxTooBig:     "tx frame larger than 64 KiB",
	DropTxWritable:   "tx chain with device-writable buffers",
	DropTxWriteError: "tap write error",
	DropRxTooBig:     "rx frame larger than buffers",
	DropRxReadError:  "tap read error",
}

func (r DropReason) String() string { return dropReasonText[r] }

// batchBuckets is the number of log2 buckets of the rx batch histogram:
// 1, 2-3, 4-7, ... 64-127, 128 and more.
const batchBuckets = 8

// queueCounters are one queue's counters, written by the worker and read
// by anyone at any time.
type queueCounters struct {
	frames, bytes, kicks, interrupts atomic.Uint64
	budgetPktHits, budgetByteHits    atomic.Uint64
	noBuffers                        atomic.Uint64
	unprobed                         atomic.Uint64 // rx: lone frames' runs ended without a read that finds nothing
	spills                           atomic.Uint64 // rx: frames longer than the chains lined up for them (MRG_RXBUF)
	rxYields                         atomic.Uint64 // tx runs ended early: rx frames were waiting
	syscalls                         atomic.Uint64 // readv, writev, recvmmsg, sendmmsg, io_uring_enter
	throttles                        atomic.Uint64 // the rate limiter parked the queue
	backendFull                      atomic.Uint64 // tx: the backend had no room; chains waited in the ring
	captured, captureDrops           atomic.Uint64 // frames written to the pcap, and not (no block free)
	drops                            [numDropReasons]atomic.Uint64
	batches                          [batchBuckets]atomic.Uint64
}

func (c *queueCounters) drop(r DropReason) { c.drops[r].Add(1) }

func (c *queueCounters) batch(frames int) {
	if frames <= 0 {
		return
	}
	b := bits.Len(uint(frames)) - 1
	c.batches[min(b, batchBuckets-1)].Add(1)
}

// QueueStats is a snapshot of one queue's counters.
type QueueStats struct {
	Queue      string            `json:"queue"`
	Frames     uint64            `json:"frames"`
	Bytes      uint64            `json:"bytes"`
	Kicks      uint64            `json:"kicks"`
	Interrupts uint64            `json:"interrupts"`
	Drops      map[string]uint64 `json:"drops,omitempty"`
	// BudgetPktHits and BudgetByteHits count runs ended by a weight.
	BudgetPktHits  uint64 `json:"budget_pkt_hits"`
	BudgetByteHits uint64 `json:"budget_byte_hits"`
	// NoBuffers counts rx runs that stopped because the guest had no
	// buffers left (the tap is then not read until it adds some).
	NoBuffers uint64 `json:"no_buffers,omitempty"`
	// Unprobed counts rx runs that read a lone frame and ended without
	// the read after it that finds the backend empty (rx.go, unprobed).
	Unprobed uint64 `json:"unprobed,omitempty"`
	// Spills counts frames longer than the rx chains lined up for them
	// (MRG_RXBUF: about the size of the frames before), whose tail was
	// read into the bounce buffer and copied into more chains after.
	Spills uint64 `json:"spills,omitempty"`
	// RxYields counts tx runs that ended before their budget because
	// frames for the guest were waiting (rxWaiting).
	RxYields uint64 `json:"rx_yields,omitempty"`
	// Batches is the histogram of frames per rx batch, keyed "1", "2-3", ...
	Batches map[string]uint64 `json:"batches,omitempty"`
	// Syscalls counts the system calls that moved this queue's frames
	// (readv, writev, recvmmsg, sendmmsg, io_uring_enter).
	Syscalls uint64 `json:"syscalls,omitempty"`
	// Throttled counts the times the rate limiter parked the queue until
	// its buckets refilled.
	Throttled uint64 `json:"throttled,omitempty"`
	// BackendFull counts the times tx found the backend without room for
	// a frame (EAGAIN) and left the rest of the ring waiting until it was
	// writable again, instead of dropping them.
	BackendFull uint64 `json:"backend_full,omitempty"`
	// Captured counts frames written to the pcap; CaptureDrops those that
	// were not, because the writer was behind.
	Captured     uint64 `json:"captured,omitempty"`
	CaptureDrops uint64 `json:"capture_drops,omitempty"`
}

// Stats is a snapshot of the device's counters; it marshals to JSON.
type Stats struct {
	// Ifname is the device's host interface, a tap or af_packet's; its
	// JSON key stays "tap" for the readers of saved stats.
	Ifname string `json:"tap"`
	// IO is what the worker runs (Device.IO): writev, uring or sendmmsg.
	IO     IOMode       `json:"io,omitempty"`
	Queues []QueueStats `json:"queues"`
	// WorkerCPUNs is the CPU time the device's worker threads used.
	WorkerCPUNs uint64 `json:"worker_cpu_ns,omitempty"`
	// With more than one queue pair (multiqueue.go): the pairs the driver
	// last asked for (1 until its first VQ_PAIRS_SET; still shown after a
	// reset), each pair's own counters (Queues above are their totals)
	// and the control queue's.
	AskedPairs int         `json:"pairs_asked,omitempty"`
	Pairs      []PairStats `json:"pairs,omitempty"`
	Ctrl       *CtrlStats  `json:"ctrl,omitempty"`
}

func bucketName(i int) string {
	lo := 1 << i
	if i == batchBuckets-1 {
		return fmt.Sprintf("%d+", lo)
	}
	if lo == 1 {
		return "1"
	}
	return fmt.Sprintf("%d-%d", lo, 2*lo-1)
}

func (c *queueCounters) snapshot(name string) QueueStats {
	s := QueueStats{
		Queue: name, Frames: c.frames.Load(), Bytes: c.bytes.Load(),
		Kicks: c.kicks.Load(), Interrupts: c.interrupts.Load(),
		BudgetPktHits: c.budgetPktHits.Load(), BudgetByteHits: c.budgetByteHits.Load(),
		NoBuffers: c.noBuffers.Load(), Unprobed: c.unprobed.Load(), Spills: c.spills.Load(), RxYields: c.rxYields.Load(), Syscalls: c.syscalls.Load(),
		Throttled: c.throttles.Load(), BackendFull: c.backendFull.Load(), Captured: c.captured.Load(), CaptureDrops: c.captureDrops.Load(),
	}
	for r := range c.drops {
		if n := c.drops[r].Load(); n > 0 {
			if s.Drops == nil {
				s.Drops = map[string]uint64{}
			}
			s.Drops[DropReason(r).String()] = n
		}
	}
	for i := range c.batches {
		if n := c.batches[i].Load(); n > 0 {
			if s.Batches == nil {
				s.Batches = map[string]uint64{}
			}
			s.Batches[bucketName(i)] = n
		}
	}
	return s
}

// String is the text form printed by --stats.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "net %s: worker CPU %.3f s, tx by %s\n", s.Ifname, float64(s.WorkerCPUNs)/1e9, s.IO)
	for _, q := range s.Queues {
		fmt.Fprintf(&b, "  %s: %d frames, %d bytes, %d kicks, %d interrupts, budget hits %d pkts / %d bytes",
			q.Queue, q.Frames, q.Bytes, q.Kicks, q.Interrupts, q.BudgetPktHits, q.BudgetByteHits)
		if q.NoBuffers > 0 {
			fmt.Fprintf(&b, ", out of guest buffers %d times", q.NoBuffers)
		}
		if q.Unprobed > 0 {
			fmt.Fprintf(&b, ", %d lone frames without a read after", q.Unprobed)
		}
		if q.Spills > 0 {
			fmt.Fprintf(&b, ", %d frames spilled past their chains", q.Spills)
		}
		if q.RxYields > 0 {
			fmt.Fprintf(&b, ", gave rx its turn early %d times", q.RxYields)
		}
		if q.Syscalls > 0 {
			fmt.Fprintf(&b, ", %.1f frames per system call", float64(q.Frames)/float64(q.Syscalls))
		}
		if q.Throttled > 0 {
			fmt.Fprintf(&b, ", throttled %d times", q.Throttled)
		}
		if q.BackendFull > 0 {
			fmt.Fprintf(&b, ", waited for room in the backend %d times", q.BackendFull)
		}
		if q.Captured+q.CaptureDrops > 0 {
			fmt.Fprintf(&b, ", captured %d (%d not: writer behind)", q.Captured, q.CaptureDrops)
		}
		b.WriteString("\n")
		for _, r := range sortedKeys(q.Drops) {
			fmt.Fprintf(&b, "    dropped %d: %s\n", q.Drops[r], r)
		}
		if len(q.Batches) > 0 {
			b.WriteString("    frames per rx batch:")
			for i := 0; i < batchBuckets; i++ {
				if n, ok := q.Batches[bucketName(i)]; ok {
					fmt.Fprintf(&b, " %s:%d", bucketName(i), n)
				}
			}
			b.WriteString("\n")
		}
	}
	s.writePairs(&b)
	return b.String()
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
