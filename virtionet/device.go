// Package virtionet is tinyvmm's virtio-net device: features and config
// space, and its datapath, a vhost-style worker per queue pair (weights
// with requeue, batched rx, event-idx suppression on both rings). Frames
// go to a Backend it is handed (netbackend's tap or af_packet socket, the
// user network's socket); it opens none itself.
package virtionet

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"tinyvmm/internal/uring"
	"tinyvmm/ratelimit"
	"tinyvmm/virtio"
)

// Queue indexes of the single queue pair.
const (
	rxQueue = 0
	txQueue = 1
)

// Device is a virtio-net device; it implements virtio.Device.
type Device struct {
	cfg      Config
	backend  Backend
	features uint64
	config   [cfgSize]byte
	pairs    []*pair // Config.Queues of them (multiqueue.go)

	mu      sync.Mutex // workers and the pairs' rings
	workers []*worker  // per pair: the running worker, nil when none

	// pairsMu serializes what changes the set of running workers:
	// activation, VQ_PAIRS_SET and reset.
	pairsMu     sync.Mutex
	act         *virtio.Activation // the activation, nil when reset
	actPairs    int                // the pairs the driver may use (MQ acked: all)
	activePairs atomic.Int32       // the pairs in use
	askedPairs  atomic.Int32       // the pairs the driver last asked for (kept after reset, for Stats)
	ctrl        *ctrlQueue         // the control queue's loop, nil when none
	ctrlStats   ctrlCounters

	capture *capture              // Config.Pcap; nil when off
	limits  [2]*ratelimit.Limiter // rx, tx rate limits; nil when off
}

var _ virtio.Device = (*Device)(nil)

// New returns a device on an open backend, which it then owns (Close
// closes it). The device opens nothing itself: the VMM opens the backend
// (netbackend's tap or af_packet socket, userproc's user network) and
// hands it in, as Firecracker's builder hands in a tap.
func New(cfg Config, b Backend) (*Device, error) {
	if cfg.Ifname == "" {
		cfg.Ifname = b.Name()
	}
	cfg, err := cfg.Normalized() // as it is when the VMM normalized it
	if err != nil {
		return nil, err
	}
	pairs, err := newPairs(cfg, b)
	if err != nil {
		return nil, err
	}
	d := &Device{
		cfg:      cfg,
		backend:  b,
		features: offeredFeatures(b.Offloads()) | mqFeatures(len(pairs)),
		config:   configSpace(cfg.MAC, cfg.MTU, len(pairs)),
		pairs:    pairs,
		workers:  make([]*worker, len(pairs)),
	}
	now := time.Now()
	d.limits = [2]*ratelimit.Limiter{ratelimit.New(cfg.RxLimit, now), ratelimit.New(cfg.TxLimit, now)}
	if cfg.Pcap != "" {
		if d.capture, err = openCapture(cfg.Pcap, cfg.Log); err != nil {
			return nil, fmt.Errorf("net %s: %v", cfg.Ifname, err)
		}
		cfg.Log("net %s: capturing every frame to %s", cfg.Ifname, cfg.Pcap)
	}
	tryRing := cfg.IO == IOUring
	for _, p := range d.pairs {
		p.io = d.chooseIO(p, tryRing)
		tryRing = p.io == IOUring // after one failure (and its notice) the rest stay with writev
	}
	return d, nil
}

// chooseIO decides, once, what pair p runs: sendmmsg on a socket backend
// (it batches already), io_uring where the config asks for it and a ring
// opens, one writev per frame otherwise.
func (d *Device) chooseIO(p *pair, tryRing bool) IOMode {
	switch {
	case isMultiFrame(d.backend):
		return IOSendmmsg
	case tryRing && d.openRing(p):
		return IOUring
	}
	return IOWritev
}

// newRing is uring.New and probeRing is probeNowait; tests replace them
// to see the fallbacks.
var (
	newRing   = uring.New
	probeRing = probeNowait
)

// openRing sets up pair p's io_uring for IOUring, or says in one line why
// the pair stays with one writev per frame (and returns false).
func (d *Device) openRing(p *pair) bool {
	r, err := newRing(maxTxGroup)
	if err == nil {
		err = probeRing(r, p.fd)
	}
	if err != nil {
		if r != nil {
			r.Close()
		}
		d.cfg.Log("net %s: io_uring unavailable (%v); one writev per frame", d.cfg.Ifname, err)
		return false
	}
	// Fixed file: no fget/fput per request. Where it fails the ring
	// still works, looking the fd up each time.
	if err := r.RegisterFile(p.fd); err != nil {
		d.cfg.Log("net %s: io_uring: %v; the ring looks the tap up per request", d.cfg.Ifname, err)
	}
	p.ring = r
	return true
}

// IO is what the first pair's worker runs: the mechanism chooseIO
// decided, or IOWritev once a uring failed.
func (d *Device) IO() IOMode {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pairs[0].io
}

func isMultiFrame(b Backend) bool {
	mf, ok := b.(MultiFramer)
	return ok && mf.MultiFrame()
}

// MAC is the guest's MAC address.
func (d *Device) MAC() net.HardwareAddr { return d.cfg.MAC }

// Backend is the device's backend (the tap).
func (d *Device) Backend() Backend { return d.backend }

// Type implements virtio.Device: 1 is net.
func (d *Device) Type() uint16 { return 1 }

// Features implements virtio.Device.
func (d *Device) Features() uint64 { return d.features }

// QueueMaxSizes implements virtio.Device: an rx and a tx queue per
// pair, and the control queue when there are several pairs.
func (d *Device) QueueMaxSizes() []uint16 {
	sizes := make([]uint16, d.numQueues())
	for i := range sizes {
		sizes[i] = d.cfg.QueueSize
	}
	if len(sizes) > 2 {
		sizes[len(sizes)-1] = ctrlQueueSize
	}
	return sizes
}

// ReadConfig implements virtio.Device.
func (d *Device) ReadConfig(offset uint64, data []byte) { readConfig(d.config[:], offset, data) }

// WriteConfig implements virtio.Device; every field is read-only.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate implements virtio.Device: it sets the backend's vnet
// header size and offloads from the acked features and starts the first
// pair's worker (and the control queue's loop, if negotiated).
func (d *Device) Activate(a virtio.Activation) error {
	if a.Features&^d.features != 0 {
		return fmt.Errorf("net %s: driver acked features %#x that were not offered", d.cfg.Ifname, a.Features&^d.features)
	}
	if a.Features&FeatMQ != 0 && a.Features&FeatCtrlVQ == 0 {
		return fmt.Errorf("net %s: driver acked MQ without CTRL_VQ", d.cfg.Ifname)
	}
	pairs, ctrl := d.layout(a.Features)
	if want := max(2*pairs, ctrl+1); len(a.Queues) < want || len(a.Kicks) < want {
		return fmt.Errorf("net %s: activation needs %d queues, got %d queues and %d kicks",
			d.cfg.Ifname, want, len(a.Queues), len(a.Kicks))
	}
	d.Reset()
	if err := d.backend.SetVnetHdrSize(vnetHdrLen(a.Features)); err != nil {
		return err
	}
	if err := d.backend.SetOffload(tunOffloadsFor(a.Features)); err != nil {
		return err
	}
	d.pairsMu.Lock()
	d.act, d.actPairs = &a, pairs
	d.pairsMu.Unlock()
	// Only the first pair until the driver asks for more (5.1.6.5.5).
	if err := d.setPairs(1); err != nil {
		d.Reset()
		return err
	}
	if ctrl >= 0 && a.Queues[ctrl] != nil && a.Queues[ctrl].Ready {
		c, err := newCtrlQueue(d, a, ctrl)
		if err != nil {
			d.Reset()
			return err
		}
		d.pairsMu.Lock()
		d.ctrl = c
		d.pairsMu.Unlock()
		c.start()
	}
	return nil
}

// Reset implements virtio.Device: it stops the control queue's
// loop and the workers and returns once none touches guest memory.
func (d *Device) Reset() {
	d.pairsMu.Lock()
	c := d.ctrl
	d.ctrl = nil
	d.pairsMu.Unlock()
	if c != nil {
		c.stop() // it may be in setPairs: pairsMu is not held here
	}
	d.pairsMu.Lock()
	defer d.pairsMu.Unlock()
	for i := range d.workers {
		d.stopWorker(i)
	}
	if d.act != nil {
		d.detachIdle()
	}
	d.act, d.actPairs = nil, 0
	d.activePairs.Store(0)
}

// Close resets the device and closes its backend (and ring).
func (d *Device) Close() error {
	d.Reset()
	d.mu.Lock()
	for _, p := range d.pairs {
		if p.ring != nil {
			p.ring.Close()
			p.ring = nil
		}
	}
	d.mu.Unlock()
	err := d.backend.Close()
	if d.capture != nil {
		if cerr := d.capture.close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Stats returns the device's counters; safe while the workers run.
// Queues are the totals over the pairs; with more than one pair, Pairs
// has each pair's own.
func (d *Device) Stats() Stats {
	s := Stats{Ifname: d.cfg.Ifname, IO: d.IO()}
	var rx, tx []*queueCounters
	for _, p := range d.pairs {
		rx, tx = append(rx, &p.counters[rxQueue]), append(tx, &p.counters[txQueue])
		s.WorkerCPUNs += p.cpu()
	}
	s.Queues = []QueueStats{snapshotSum("rx", rx), snapshotSum("tx", tx)}
	if len(d.pairs) > 1 {
		s.AskedPairs = int(d.askedPairs.Load())
		for i, p := range d.pairs {
			s.Pairs = append(s.Pairs, PairStats{Pair: i, WorkerCPUNs: p.cpu(), Queues: []QueueStats{
				p.counters[rxQueue].snapshot("rx"), p.counters[txQueue].snapshot("tx"),
			}})
		}
		s.Ctrl = d.ctrlStats.snapshot()
	}
	return s
}
