// Package virtiofs is the virtio-fs device (virtio 1.2, section 5.11;
// device ID 26): FUSE requests over a high-priority queue (FORGETs) and
// request queues, served in-process from a host directory.
//
// The FUSE protocol is github.com/hanwen/go-fuse/v2's: its ProtocolServer
// parses each request from the chain's readable buffers, calls the file
// system, and writes the reply into the chain's writable buffers and
// nowhere else (file data is read straight into them). The file system
// (fs.go, files.go) is this package's own: go-fuse's loopback follows
// symlinks on the host, so every host access here goes through sharefs's
// discipline instead (openat2 beneath the share, no symlink followed).
//
// Requests are served concurrently: each chain gets a goroutine, up to
// MaxInflight per device, so a request that blocks (a FIFO read, a slow
// disk) holds one slot and not the queue. Everything in a request is
// hostile: a malformed one gets an error reply or none, never a crash,
// and the memory one request can make the device hold is bounded
// (MaxRequest in, MaxReply out).
package virtiofs

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tinyvmm/sharefs"
	"tinyvmm/virtio"
)

// DeviceID is the virtio device ID of a file system device.
const DeviceID = 26

// TagLen is the size of the config space's tag field: a tag of up to 36
// bytes, NUL-padded.
const TagLen = 36

const (
	// HiprioQueueSize and RequestQueueSize are the queues' maximum sizes.
	// Linux puts one page of a READ or WRITE in each descriptor, so a
	// 1 MiB request takes 258; indirect tables let it fit at any ring
	// occupancy.
	HiprioQueueSize  = 128
	RequestQueueSize = 1024

	// MaxInflight bounds the requests served at once per device.
	MaxInflight = 32
	// MaxWrite is the largest READ or WRITE the guest is told to send.
	MaxWrite = 1 << 20
	// MaxRequest and MaxReply bound the bytes one request is read from
	// and may write: a WRITE's data and a READ's, and some room for the
	// headers. Bigger chains get an error.
	MaxRequest = MaxWrite + 64<<10
	MaxReply   = MaxWrite + 64<<10
)

// features offered: the transport features the queues support.
const features = virtio.FeatureVersion1 | virtio.FeatureIndirectDesc | virtio.FeatureEventIdx

// Config is one shared directory.
type Config struct {
	Tag      string
	Share    *sharefs.Share
	ReadOnly bool // every change is refused (EROFS)
	// RequestQueues is the number of request queues offered (1 if 0).
	// Linux 6.1 uses the first only; requests on it are served
	// concurrently all the same.
	RequestQueues int
	// Timeout is how long the guest may trust a name or an attribute
	// without asking again (1 s if 0).
	Timeout time.Duration
	Logf    func(format string, args ...any)
}

// Device is one virtio-fs device.
type Device struct {
	cfg Config

	mu   sync.Mutex
	sess *session // nil while not activated

	stats counters
}

type counters struct {
	requests, errors, oversized, panics atomic.Uint64
	bytesIn, bytesOut                   atomic.Uint64
	inflight, maxInflight               atomic.Int64
}

// New makes a device for cfg.
func New(cfg Config) (*Device, error) {
	if cfg.Tag == "" || len(cfg.Tag) > TagLen || strings.ContainsAny(cfg.Tag, "\x00 ,") {
		return nil, fmt.Errorf("virtio-fs tag %q: give 1 to %d bytes, no space, comma or NUL", cfg.Tag, TagLen)
	}
	if cfg.Share == nil {
		return nil, fmt.Errorf("virtio-fs %s: no share", cfg.Tag)
	}
	if cfg.RequestQueues <= 0 {
		cfg.RequestQueues = 1
	}
	if cfg.RequestQueues > 64 {
		return nil, fmt.Errorf("virtio-fs %s: at most 64 request queues", cfg.Tag)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Device{cfg: cfg}, nil
}

// Tag is the tag the guest mounts by (mount -t virtiofs TAG DIR).
func (d *Device) Tag() string { return d.cfg.Tag }

// Type implements virtio.Device.
func (d *Device) Type() uint16 { return DeviceID }

// Features implements virtio.Device.
func (d *Device) Features() uint64 { return features }

// QueueMaxSizes implements virtio.Device: hiprio, then the
// request queues.
func (d *Device) QueueMaxSizes() []uint16 {
	s := []uint16{HiprioQueueSize}
	for i := 0; i < d.cfg.RequestQueues; i++ {
		s = append(s, RequestQueueSize)
	}
	return s
}

// ReadConfig implements virtio.Device: u8 tag[36], le32
// num_request_queues (notify_buf_size is only there with
// VIRTIO_FS_F_NOTIFICATION, not offered). Reads past the end are zeros.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	var cfg [TagLen + 4]byte
	copy(cfg[:], d.cfg.Tag)
	binary.LittleEndian.PutUint32(cfg[TagLen:], uint32(d.cfg.RequestQueues))
	for i := range data {
		data[i] = 0
		if o := offset + uint64(i); o < uint64(len(cfg)) {
			data[i] = cfg[o]
		}
	}
}

// WriteConfig implements virtio.Device: the config is read-only.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate implements virtio.Device: a fresh FUSE session (no
// nodes, no open files) and a worker per queue.
func (d *Device) Activate(a virtio.Activation) error {
	if len(a.Queues) != 1+d.cfg.RequestQueues || len(a.Kicks) != len(a.Queues) {
		return fmt.Errorf("virtio-fs: %d queues, want %d", len(a.Queues), 1+d.cfg.RequestQueues)
	}
	s, err := newSession(d, a)
	if err != nil {
		return err
	}
	d.mu.Lock()
	old := d.sess
	d.sess = s
	d.mu.Unlock()
	if old != nil {
		old.stop()
	}
	s.start()
	return nil
}

// Reset implements virtio.Device. It returns once no request is
// being served any more: the queues' workers are stopped, every open file
// is closed (which wakes a read waiting on a FIFO) and the requests in
// flight have finished.
func (d *Device) Reset() {
	d.mu.Lock()
	s := d.sess
	d.sess = nil
	d.mu.Unlock()
	if s != nil {
		s.stop()
	}
}

// Stats are the device's counters.
type Stats struct {
	Tag         string
	Requests    uint64 // chains served
	Errors      uint64 // requests answered with an error by the device itself (malformed, too big, a panic)
	BytesIn     uint64 // request bytes the guest offered
	BytesOut    uint64 // reply bytes written to the guest
	MaxInflight int64  // the most requests served at once
}

// Stats returns the counters.
func (d *Device) Stats() Stats {
	return Stats{Tag: d.cfg.Tag, Requests: d.stats.requests.Load(), Errors: d.stats.errors.Load(),
		BytesIn: d.stats.bytesIn.Load(), BytesOut: d.stats.bytesOut.Load(), MaxInflight: d.stats.maxInflight.Load()}
}
