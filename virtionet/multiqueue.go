package virtionet

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"tinyvmm/internal/schedstat"
	"tinyvmm/internal/uring"
	"tinyvmm/virtio"
)

// Multiqueue (VIRTIO_NET_F_MQ, virtio 1.2 5.1.6.5.5), vhost's model: the
// device has Config.Queues rx/tx pairs, queue 2i is pair i's rx and 2i+1
// its tx, and the control queue comes last. Each pair has its own backend
// fd (a tap opened with IFF_MULTI_QUEUE), its own worker thread with its
// own epoll set, budgets and io_uring ring, and its own counters. Only the
// pairs the driver enabled with VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET (one until
// it says otherwise) have a worker and an attached tap queue, so the
// kernel never steers frames to a pair nobody serves.

// Feature bits of multiqueue (virtio 1.2, 5.1.3).
const (
	FeatCtrlVQ = 1 << 17 // VIRTIO_NET_F_CTRL_VQ: the control virtqueue
	FeatMQ     = 1 << 22 // VIRTIO_NET_F_MQ: more than one queue pair
)

// MaxQueuePairs bounds Config.Queues (the default caps at 8
// vCPUs; this leaves room for asking for more).
const MaxQueuePairs = 16

// MultiQueue is a Backend with one fd per queue pair (a tap opened with
// IFF_MULTI_QUEUE). Fd is QueueFds()[0].
type MultiQueue interface {
	// QueueFds are the fds of the pairs, in order.
	QueueFds() []int
	// SetQueueEnabled attaches (on) or detaches queue i: a detached queue
	// gets no frames from the backend and takes none.
	SetQueueEnabled(i int, on bool) error
}

// pair is the state of one queue pair that outlives its workers: the
// backend fd, the io_uring ring, the counters and the CPU its workers used.
type pair struct {
	fd       int
	counters [2]queueCounters // rx, tx
	// io is what the pair's workers run, decided once by New (chooseIO);
	// IOWritev from the moment a uring fails (dropRing). Under Device.mu.
	io IOMode
	// ring is the io_uring of IOUring, nil otherwise or when it failed.
	// Only the pair's running worker uses it; Close closes it.
	ring *uring.Ring

	trace io.Writer // Config.Trace; with several pairs, naming the pair (pairTrace)
	name  string    // its worker thread's name: net-IFNAME, with several pairs net-IFNAME-qN

	workerTid      atomic.Int32  // the worker's OS thread while it runs
	workerCPUStart atomic.Uint64 // that thread's CPU time when the worker started
	workerCPUDone  atomic.Uint64 // CPU time of workers that have stopped
}

// cpu is the CPU time the pair's workers have used, from /proc (schedstat).
func (p *pair) cpu() uint64 {
	ns := p.workerCPUDone.Load()
	if tid := p.workerTid.Load(); tid != 0 {
		if now, start := schedstat.ThreadCPU(int(tid)), p.workerCPUStart.Load(); now >= start {
			ns += now - start
		}
	}
	return ns
}

// newPairs makes the pairs on b's fds: Queues of them on a MultiQueue
// backend, else one.
func newPairs(cfg Config, b Backend) ([]*pair, error) {
	fds := []int{b.Fd()}
	if cfg.Queues > 1 {
		mq, ok := b.(MultiQueue)
		if !ok || len(mq.QueueFds()) < cfg.Queues {
			return nil, fmt.Errorf("net %s: queues=%d needs a backend with that many queues (a tap)", cfg.Ifname, cfg.Queues)
		}
		fds = mq.QueueFds()[:cfg.Queues]
	}
	ps := make([]*pair, len(fds))
	var mu sync.Mutex
	for i, fd := range fds {
		ps[i] = &pair{fd: fd, trace: cfg.Trace, name: "net-" + cfg.Ifname}
		if len(fds) > 1 {
			ps[i].name += "-q" + strconv.Itoa(i)
		}
		if cfg.Trace != nil && len(fds) > 1 {
			ps[i].trace = &pairTrace{mu: &mu, w: cfg.Trace, pair: strconv.Itoa(i)}
		}
	}
	return ps, nil
}

// pairTrace is the trace writer of one pair of several: the workers write
// whole lines, one at a time through the shared lock, and each line's
// queue gets the pair's number ("+1.000010 tx1 kick").
type pairTrace struct {
	mu   *sync.Mutex
	w    io.Writer
	pair string
	buf  []byte
}

func (t *pairTrace) Write(line []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := line
	if sp := bytes.IndexByte(line, ' '); sp >= 0 {
		end := sp + 1 + bytes.IndexByte(line[sp+1:], ' ')
		if end <= sp {
			end = len(line) - 1
		}
		b = append(append(append(t.buf[:0], line[:end]...), t.pair...), line[end:]...)
		t.buf = b
	}
	if _, err := t.w.Write(b); err != nil {
		return 0, err
	}
	return len(line), nil
}

// mqFeatures are the features a device of n pairs adds: none for one
// pair, which stays exactly the single-queue device.
func mqFeatures(n int) uint64 {
	if n > 1 {
		return FeatCtrlVQ | FeatMQ
	}
	return 0
}

// numQueues is the device's virtqueues: two per pair, and the control
// queue when there is more than one pair.
func (d *Device) numQueues() int {
	if len(d.pairs) > 1 {
		return 2*len(d.pairs) + 1
	}
	return 2
}

// layout is where the driver's acked features put the queues: how many
// pairs it may use and the control queue's index (-1: none). Without MQ
// the control queue is queue 2 (virtio 1.2, 5.1.2).
func (d *Device) layout(acked uint64) (pairs, ctrl int) {
	pairs, ctrl = 1, -1
	if acked&FeatMQ != 0 {
		pairs = len(d.pairs)
	}
	if acked&FeatCtrlVQ != 0 {
		ctrl = 2 * pairs
	}
	return pairs, ctrl
}

// pairActivation is the part of a for pair i: its rx and tx queue, kicks
// and interrupts, in the single pair's order.
func pairActivation(a virtio.Activation, i int) virtio.Activation {
	p := a
	p.Queues = a.Queues[2*i : 2*i+2]
	p.Kicks = a.Kicks[2*i : 2*i+2]
	p.Interrupts = nil
	if len(a.Interrupts) >= 2*i+2 {
		p.Interrupts = a.Interrupts[2*i : 2*i+2]
	}
	return p
}

// setPairs makes pairs [0, n) the ones in use: it stops the workers of
// the others and detaches their backend queues, then attaches and starts
// the ones missing. It runs at activation and for the control queue's
// VQ_PAIRS_SET, never on a worker.
func (d *Device) setPairs(n int) error {
	d.pairsMu.Lock()
	defer d.pairsMu.Unlock()
	if d.act == nil {
		return fmt.Errorf("net %s: device not active", d.cfg.Ifname)
	}
	if n < 1 || n > d.actPairs {
		return fmt.Errorf("net %s: %d queue pairs asked for, %d offered", d.cfg.Ifname, n, d.actPairs)
	}
	mq, _ := d.backend.(MultiQueue)
	for i := len(d.pairs) - 1; i >= n; i-- {
		d.stopWorker(i)
		if mq != nil && len(d.pairs) > 1 {
			if err := mq.SetQueueEnabled(i, false); err != nil {
				return err
			}
		}
	}
	for i := 0; i < n; i++ {
		if d.workers[i] != nil {
			continue
		}
		// The worker first: a queue the guest did not set up must not
		// get the tap's frames with nobody to read them.
		w, err := newWorker(d, d.pairs[i], pairActivation(*d.act, i))
		if err != nil {
			return err
		}
		if mq != nil && len(d.pairs) > 1 {
			if err := mq.SetQueueEnabled(i, true); err != nil {
				w.closePoll()
				return err
			}
		}
		d.mu.Lock()
		d.workers[i] = w
		d.mu.Unlock()
		w.start()
	}
	d.activePairs.Store(int32(n))
	d.askedPairs.Store(int32(n))
	return nil
}

// detachIdle detaches the backend queues of every pair but the first
// after a reset, so the kernel stops sending them frames; pairsMu is held.
func (d *Device) detachIdle() {
	if mq, ok := d.backend.(MultiQueue); ok && len(d.pairs) > 1 {
		for i := 1; i < len(d.pairs); i++ {
			mq.SetQueueEnabled(i, false) // a failure leaves it as the next activation finds it
		}
	}
}

// stopWorker stops pair i's worker, if it runs; pairsMu is held.
func (d *Device) stopWorker(i int) {
	d.mu.Lock()
	w := d.workers[i]
	d.workers[i] = nil
	d.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// ActivePairs is the number of queue pairs in use (0 before activation).
func (d *Device) ActivePairs() int { return int(d.activePairs.Load()) }

// validQueues fills in and checks Config.Queues.
func (c *Config) validQueues() error {
	if c.Queues == 0 {
		c.Queues = 1
	}
	switch {
	case c.Queues < 1 || c.Queues > MaxQueuePairs:
		return fmt.Errorf("net %s: queues %d is outside 1..%d", c.Ifname, c.Queues, MaxQueuePairs)
	case c.Queues == 1:
		return nil
	case c.User:
		return fmt.Errorf("net %s: a user network has one queue pair, not queues=%d", c.Ifname, c.Queues)
	case c.AFPacket != "":
		return fmt.Errorf("net %s: queues=%d is for a tap; af_packet has one queue", c.Ifname, c.Queues)
	case c.Pcap != "" || c.RxLimit.On() || c.TxLimit.On():
		// The capture buffer and the token buckets belong to one worker.
		return fmt.Errorf("net %s: pcap and rate limits take one queue pair (queues=1), not %d", c.Ifname, c.Queues)
	}
	return nil
}

// Pairs is the number of queue pairs the device offers.
func (d *Device) Pairs() int { return len(d.pairs) }

// DefaultPairsCap caps the default number of queue pairs.
const DefaultPairsCap = 8

// DefaultQueues is the number of queue pairs for c when it names none: one
// per vCPU up to DefaultPairsCap, as Linux's driver then uses one per CPU;
// one where more cannot be had (af_packet, a user network, pcap, rate
// limits). Whether the host's tap can have more (one made without
// multi_queue cannot) is the backend's to say: the VMM asks
// netbackend.SingleQueueTap.
func DefaultQueues(c Config, cpus int) int {
	if c.AFPacket != "" || c.User || c.Pcap != "" || c.RxLimit.On() || c.TxLimit.On() {
		return 1
	}
	return max(1, min(cpus, DefaultPairsCap))
}
