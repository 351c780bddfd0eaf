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
	"sort"
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
	// Each has its own worker. Linux before 6.11 uses the first only
	// (requests on it are served concurrently all the same); the
	// default guest's kernel carries the multi-queue change and sends
	// each CPU's requests on a queue of its own, up to one per CPU.
	RequestQueues int
	// Cache is what the guest may keep of what it read (CacheAuto if
	// zero).
	Cache Cache
	// Timeout is how long the guest may trust a name or an attribute
	// without asking again (if 0: 1 s with CacheAuto, 60 s with
	// CacheAlways).
	Timeout time.Duration
	Logf    func(format string, args ...any)
}

// Cache is how much of the share the guest keeps in its own caches, the
// policies of virtiofsd's --cache option of the same names. Whatever the
// policy, the guest sees its own changes at once, and a write(2) reaches
// the host before it returns (the device never asks for FUSE's writeback
// cache; only pages written through a shared mmap wait for the guest's
// writeback, as on any file system).
type Cache int

const (
	// CacheAuto trusts a name or an attribute for Timeout (1 s), and
	// keeps a file's pages only while it is open: each open reads the
	// file again from the host, so a change on the host is seen at the
	// next open (close-to-open), and within Timeout by a file kept
	// open (the guest drops its pages when the size or mtime it gets
	// moved). Directory listings are read from the host at each open.
	CacheAuto Cache = iota
	// CacheAlways trusts names and attributes for Timeout (60 s) and
	// keeps file pages and directory listings across opens, until an
	// attribute fetched after Timeout shows a new size or mtime: for a
	// tree the host does not change while the guest runs (the host's
	// root under --root). A change on the host can go unseen for
	// Timeout.
	CacheAlways
)

func (c Cache) String() string {
	if c == CacheAlways {
		return "always"
	}
	return "auto"
}

// ParseCache is the inverse of Cache.String.
func ParseCache(s string) (Cache, error) {
	switch s {
	case "auto":
		return CacheAuto, nil
	case "always":
		return CacheAlways, nil
	}
	return 0, fmt.Errorf("cache policy %q: give auto or always", s)
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
	// ops counts the requests of each opcode (the last slot: any
	// opcode past the table).
	ops [len(opNames) + 1]atomic.Uint64
	// queues counts the requests taken off each queue (hiprio first).
	queues []atomic.Uint64
	// readNanos is the time spent serving READs, from the chain taken
	// off its ring to its reply written.
	readNanos atomic.Uint64
}

// opNames are the FUSE opcodes Linux sends, by number (include/uapi/linux/fuse.h).
var opNames = [...]string{1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK", 6: "SYMLINK",
	8: "MKNOD", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR", 12: "RENAME", 13: "LINK", 14: "OPEN", 15: "READ",
	16: "WRITE", 17: "STATFS", 18: "RELEASE", 20: "FSYNC", 21: "SETXATTR", 22: "GETXATTR", 23: "LISTXATTR",
	24: "REMOVEXATTR", 25: "FLUSH", 26: "INIT", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR",
	30: "FSYNCDIR", 31: "GETLK", 32: "SETLK", 33: "SETLKW", 34: "ACCESS", 35: "CREATE", 36: "INTERRUPT",
	37: "BMAP", 38: "DESTROY", 39: "IOCTL", 40: "POLL", 41: "NOTIFY_REPLY", 42: "BATCH_FORGET",
	43: "FALLOCATE", 44: "READDIRPLUS", 45: "RENAME2", 46: "LSEEK", 47: "COPY_FILE_RANGE",
	48: "SETUPMAPPING", 49: "REMOVEMAPPING", 50: "SYNCFS", 51: "TMPFILE", 52: "STATX"}

// countOp counts one request of opcode op.
func (c *counters) countOp(op uint32) {
	if op >= uint32(len(opNames)) || opNames[op] == "" {
		op = uint32(len(opNames))
	}
	c.ops[op].Add(1)
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
	if cfg.Cache != CacheAuto && cfg.Cache != CacheAlways {
		return nil, fmt.Errorf("virtio-fs %s: no cache policy %d", cfg.Tag, cfg.Cache)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
		if cfg.Cache == CacheAlways {
			cfg.Timeout = time.Minute
		}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	d := &Device{cfg: cfg}
	d.stats.queues = make([]atomic.Uint64, 1+cfg.RequestQueues)
	return d, nil
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
	// Ops counts the requests by FUSE opcode ("OTHER": unknown ones).
	Ops map[string]uint64 `json:",omitempty"`
	// Queues counts the requests taken off each queue: hiprio, then
	// the request queues.
	Queues []uint64 `json:",omitempty"`
	// ReadNanos is the time spent serving READs (summed over READs
	// served at once): over Ops["READ"], what one READ waits for in
	// the device.
	ReadNanos uint64 `json:",omitempty"`
}

// Stats returns the counters.
func (d *Device) Stats() Stats {
	s := Stats{Tag: d.cfg.Tag, Requests: d.stats.requests.Load(), Errors: d.stats.errors.Load(),
		BytesIn: d.stats.bytesIn.Load(), BytesOut: d.stats.bytesOut.Load(), MaxInflight: d.stats.maxInflight.Load(),
		ReadNanos: d.stats.readNanos.Load()}
	for i := range d.stats.queues {
		s.Queues = append(s.Queues, d.stats.queues[i].Load())
	}
	for op := range d.stats.ops {
		if n := d.stats.ops[op].Load(); n > 0 {
			if s.Ops == nil {
				s.Ops = map[string]uint64{}
			}
			name := "OTHER"
			if op < len(opNames) {
				name = opNames[op]
			}
			s.Ops[name] = n
		}
	}
	return s
}

// String is the counters on one line, the opcodes by name.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "virtio-fs %s: %d requests, %d errors, %d bytes in, %d out, at most %d at once;",
		s.Tag, s.Requests, s.Errors, s.BytesIn, s.BytesOut, s.MaxInflight)
	names := make([]string, 0, len(s.Ops))
	for n := range s.Ops {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, s.Ops[n])
	}
	if len(s.Queues) > 0 {
		fmt.Fprintf(&b, "; per queue %v", s.Queues)
	}
	return b.String()
}
