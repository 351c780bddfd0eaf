package virtionet

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// PairStats are one queue pair's counters: its rx and tx queue, and the
// CPU time of its worker threads.
type PairStats struct {
	Pair        int          `json:"pair"`
	Queues      []QueueStats `json:"queues"`
	WorkerCPUNs uint64       `json:"worker_cpu_ns,omitempty"`
}

// CtrlStats count the control queue's commands.
type CtrlStats struct {
	// Commands answered; Errors those answered VIRTIO_NET_ERR (an unknown
	// class or command, a bad length or value); Unanswerable chains that
	// had no byte to put the answer in.
	Commands     uint64 `json:"commands"`
	Errors       uint64 `json:"errors,omitempty"`
	Unanswerable uint64 `json:"unanswerable,omitempty"`
}

type ctrlCounters struct {
	commands, errors, unanswerable atomic.Uint64
}

func (c *ctrlCounters) snapshot() *CtrlStats {
	return &CtrlStats{Commands: c.commands.Load(), Errors: c.errors.Load(), Unanswerable: c.unanswerable.Load()}
}

// snapshotSum is the snapshot of the sum of several queues' counters.
func snapshotSum(name string, cs []*queueCounters) QueueStats {
	var sum QueueStats
	for i, c := range cs {
		s := c.snapshot(name)
		if i == 0 {
			sum = s
			continue
		}
		sum.Frames += s.Frames
		sum.Bytes += s.Bytes
		sum.Kicks += s.Kicks
		sum.Interrupts += s.Interrupts
		sum.BudgetPktHits += s.BudgetPktHits
		sum.BudgetByteHits += s.BudgetByteHits
		sum.NoBuffers += s.NoBuffers
		sum.Unprobed += s.Unprobed
		sum.Spills += s.Spills
		sum.RxYields += s.RxYields
		sum.Syscalls += s.Syscalls
		sum.Throttled += s.Throttled
		sum.BackendFull += s.BackendFull
		sum.Captured += s.Captured
		sum.CaptureDrops += s.CaptureDrops
		sum.Drops = addCounts(sum.Drops, s.Drops)
		sum.Batches = addCounts(sum.Batches, s.Batches)
	}
	return sum
}

func addCounts(dst, src map[string]uint64) map[string]uint64 {
	for k, v := range src {
		if dst == nil {
			dst = map[string]uint64{}
		}
		dst[k] += v
	}
	return dst
}

// writePairs adds the per-pair lines of --stats: frames each way and the
// worker's CPU per pair, and the control queue's commands.
func (s Stats) writePairs(b *strings.Builder) {
	if len(s.Pairs) == 0 {
		return
	}
	fmt.Fprintf(b, "  %d of %d queue pairs asked for by the driver\n", s.AskedPairs, len(s.Pairs))
	for _, p := range s.Pairs {
		fmt.Fprintf(b, "  pair %d:", p.Pair)
		for _, q := range p.Queues {
			fmt.Fprintf(b, " %s %d frames %d bytes %d kicks %d interrupts,", q.Queue, q.Frames, q.Bytes, q.Kicks, q.Interrupts)
		}
		fmt.Fprintf(b, " worker CPU %.3f s\n", float64(p.WorkerCPUNs)/1e9)
	}
	if c := s.Ctrl; c != nil {
		fmt.Fprintf(b, "  control queue: %d commands, %d answered with an error, %d unanswerable\n", c.Commands, c.Errors, c.Unanswerable)
	}
}
