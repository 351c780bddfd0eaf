// Package virtionet is tinyvmm's virtio-net device: features and config
// space, a vhost-style worker per queue pair (weights with requeue, batched
// rx, event-idx suppression on both rings) and its backends (tap).
package virtionet

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"tinyvmm/devices"
	"tinyvmm/internal/schedstat"
	"tinyvmm/internal/uring"
)

// Queue indexes of the single queue pair.
const (
	rxQueue = 0
	txQueue = 1
)

// Device is a virtio-net device; it implements devices.VirtioDevice.
type Device struct {
	cfg      Config
	backend  Backend
	features uint64
	config   [cfgSize]byte
	counters [2]queueCounters // rx, tx

	mu     sync.Mutex
	worker *worker // the running worker, nil before Activate and after Reset

	// ring is the io_uring of IO=uring, nil otherwise or when it failed.
	// Only the running worker uses it; Close closes it after Reset.
	ring *uring.Ring

	capture *capture    // Config.Pcap; nil when off
	limits  [2]*limiter // rx, tx rate limits; nil when off

	workerTid      atomic.Int32  // the worker's OS thread while it runs
	workerCPUStart atomic.Uint64 // that thread's CPU time when the worker started
	workerCPUDone  atomic.Uint64 // CPU time of workers that have stopped
}

var _ devices.VirtioDevice = (*Device)(nil)

// New opens (or creates) the tap cfg.Ifname, or the AF_PACKET socket on
// cfg.AFPacket, and returns the device on it. cfg.Log is told which.
func New(cfg Config) (*Device, error) {
	if cfg.AFPacket != "" {
		if cfg.Ifname == "" {
			cfg.Ifname = cfg.AFPacket
		}
		p, err := OpenAFPacket(cfg.AFPacket)
		if err != nil {
			return nil, err
		}
		if cfg.Log != nil {
			cfg.Log("opened af_packet on %s", cfg.AFPacket)
		}
		d, err := NewWithBackend(cfg, p)
		if err != nil {
			p.Close()
		}
		return d, err
	}
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	if cfg.Ifname == "" {
		return nil, errors.New("net: no tap name given (use --net tap=NAME)")
	}
	tap, err := OpenTap(cfg.Ifname, cfg.MTU)
	if err != nil {
		return nil, err
	}
	cfg.Log("%s", tap.Opened())
	d, err := NewWithBackend(cfg, tap)
	if err != nil {
		tap.Close()
	}
	return d, err
}

// NewWithBackend returns a device on an already open backend, which it
// then owns (Close closes it).
func NewWithBackend(cfg Config, b Backend) (*Device, error) {
	if cfg.Ifname == "" {
		cfg.Ifname = b.Name()
	}
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, err
	}
	d := &Device{
		cfg:      cfg,
		backend:  b,
		features: offeredFeatures(b.Offloads()),
		config:   configSpace(cfg.MAC, cfg.MTU),
	}
	now := time.Now()
	d.limits = [2]*limiter{newLimiter(cfg.RxLimit, now), newLimiter(cfg.TxLimit, now)}
	if cfg.Pcap != "" {
		if d.capture, err = openCapture(cfg.Pcap, cfg.Log); err != nil {
			return nil, fmt.Errorf("net %s: %v", cfg.Ifname, err)
		}
		cfg.Log("net %s: capturing every frame to %s", cfg.Ifname, cfg.Pcap)
	}
	if cfg.IO == IOUring {
		d.openRing()
	}
	return d, nil
}

// newRing is uring.New and probeRing is probeNowait; tests replace them
// to see the fallbacks.
var (
	newRing   = uring.New
	probeRing = probeNowait
)

// openRing sets up the io_uring for IO=uring, or says in one line why the
// device stays with one writev per frame.
func (d *Device) openRing() {
	if isMultiFrame(d.backend) {
		return // sendmmsg batches already
	}
	r, err := newRing(maxTxGroup)
	if err == nil {
		err = probeRing(r, d.backend.Fd())
	}
	if err != nil {
		if r != nil {
			r.Close()
		}
		d.cfg.Log("net %s: io_uring unavailable (%v); one writev per frame", d.cfg.Ifname, err)
		return
	}
	d.ring = r
}

// IO is how tx frames reach the backend: "uring", "sendmmsg" or "writev".
func (d *Device) IO() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.ring != nil:
		return IOUring
	case isMultiFrame(d.backend):
		return "sendmmsg"
	}
	return IOWritev
}

func isMultiFrame(b Backend) bool {
	mf, ok := b.(MultiFramer)
	return ok && mf.MultiFrame()
}

// MAC is the guest's MAC address.
func (d *Device) MAC() net.HardwareAddr { return d.cfg.MAC }

// Backend is the device's backend (the tap).
func (d *Device) Backend() Backend { return d.backend }

// Type implements devices.VirtioDevice: 1 is net.
func (d *Device) Type() uint16 { return 1 }

// Features implements devices.VirtioDevice.
func (d *Device) Features() uint64 { return d.features }

// QueueMaxSizes implements devices.VirtioDevice: one rx and one tx queue.
func (d *Device) QueueMaxSizes() []uint16 { return []uint16{d.cfg.QueueSize, d.cfg.QueueSize} }

// ReadConfig implements devices.VirtioDevice.
func (d *Device) ReadConfig(offset uint64, data []byte) { readConfig(d.config[:], offset, data) }

// WriteConfig implements devices.VirtioDevice; every field is read-only.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate implements devices.VirtioDevice: it sets the backend's vnet
// header size and offloads from the acked features and starts the worker.
func (d *Device) Activate(a devices.Activation) error {
	if len(a.Queues) < 2 || len(a.Kicks) < 2 {
		return fmt.Errorf("net %s: activation needs an rx and a tx queue, got %d queues and %d kicks",
			d.cfg.Ifname, len(a.Queues), len(a.Kicks))
	}
	if a.Features&^d.features != 0 {
		return fmt.Errorf("net %s: driver acked features %#x that were not offered", d.cfg.Ifname, a.Features&^d.features)
	}
	d.Reset()
	if err := d.backend.SetVnetHdrSize(vnetHdrLen(a.Features)); err != nil {
		return err
	}
	if err := d.backend.SetOffload(tunOffloadsFor(a.Features)); err != nil {
		return err
	}
	w, err := newWorker(d, a)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.worker = w
	d.mu.Unlock()
	w.start()
	return nil
}

// Reset implements devices.VirtioDevice: it stops the worker and returns
// once it no longer touches guest memory.
func (d *Device) Reset() {
	d.mu.Lock()
	w := d.worker
	d.worker = nil
	d.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// Close resets the device and closes its backend (and ring).
func (d *Device) Close() error {
	d.Reset()
	d.mu.Lock()
	if d.ring != nil {
		d.ring.Close()
		d.ring = nil
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

// Stats returns the device's counters; safe while the worker runs.
func (d *Device) Stats() Stats {
	return Stats{Ifname: d.cfg.Ifname, IO: d.IO(), WorkerCPUNs: d.workerCPU(), Queues: []QueueStats{
		d.counters[rxQueue].snapshot("rx"),
		d.counters[txQueue].snapshot("tx"),
	}}
}

// workerCPU is the CPU time the device's workers have used, from /proc
// (schedstat). On a shared machine it is a steadier measure of the
// device's cost than frames per wall second.
func (d *Device) workerCPU() uint64 {
	ns := d.workerCPUDone.Load()
	if tid := d.workerTid.Load(); tid != 0 {
		if now, start := schedstat.ThreadCPU(int(tid)), d.workerCPUStart.Load(); now >= start {
			ns += now - start
		}
	}
	return ns
}
