// Package virtio9p is the virtio-9p device (virtio 1.2, section 5.11
// "9P Transport"; device ID 9): one request queue whose chains each hold a
// 9P2000.L request (readable buffers) and room for its reply (writable
// buffers), served in-process by github.com/hugelgupf/p9's server over
// whatever p9.Attacher it is given (tinyvmm gives it a sharefs.Share).
//
// The p9 server reads requests from a byte stream and writes replies to
// one; the device is the bridge. It takes one chain at a time, checks the
// request's framing itself (a size field that lies, a message longer than
// the negotiated msize: the server would drop the whole connection for
// those), hands the bytes to the server and streams the reply straight
// into the chain's writable buffers. Requests are served one after the
// other, so every reply belongs to the chain in flight, even the ones the
// server sends with no tag for a request it could not decode. Everything
// in a request is hostile: a malformed one gets an Rlerror, never a crash.
package virtio9p

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/hugelgupf/p9/p9"

	"tinyvmm/virtio"
)

// DeviceID is the virtio device ID of a 9P transport.
const DeviceID = 9

// FeatMountTag is VIRTIO_9P_MOUNT_TAG: the config space holds the tag the
// guest mounts by (mount -t 9p -o trans=virtio TAG DIR).
const FeatMountTag = 1 << 0

// QueueSize is the request queue's maximum size. Linux's 9p transport uses
// chains of up to 128 descriptors (its VIRTQUEUE_NUM); indirect tables let
// them fit at any ring occupancy.
const QueueSize = 256

// MaxTagLen bounds the mount tag (QEMU allows the same).
const MaxTagLen = 255

// features offered: the tag, and the transport features the queue supports.
const features = virtio.FeatureVersion1 | virtio.FeatureIndirectDesc | virtio.FeatureEventIdx | FeatMountTag

// Device is one virtio-9p device: a mount tag and the tree behind it.
type Device struct {
	tag      string
	attacher p9.Attacher
	logf     func(format string, args ...any)

	mu sync.Mutex
	w  *worker // nil while not activated

	stats counters
}

// New makes a device that serves attacher under the mount tag tag. logf
// gets the device's rare messages (nil: none).
func New(tag string, attacher p9.Attacher, logf func(format string, args ...any)) (*Device, error) {
	if tag == "" || len(tag) > MaxTagLen || strings.ContainsAny(tag, "\x00 ,") {
		return nil, fmt.Errorf("9p mount tag %q: give 1 to %d characters, no space, comma or NUL", tag, MaxTagLen)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Device{tag: tag, attacher: attacher, logf: logf}, nil
}

// Tag is the mount tag.
func (d *Device) Tag() string { return d.tag }

// Type implements virtio.Device.
func (d *Device) Type() uint16 { return DeviceID }

// Features implements virtio.Device.
func (d *Device) Features() uint64 { return features }

// QueueMaxSizes implements virtio.Device: one request queue.
func (d *Device) QueueMaxSizes() []uint16 { return []uint16{QueueSize} }

// ReadConfig implements virtio.Device: le16 tag_len, then the tag
// (not NUL-terminated). Reads past the end are zeros.
func (d *Device) ReadConfig(offset uint64, data []byte) {
	cfg := make([]byte, 2+len(d.tag))
	binary.LittleEndian.PutUint16(cfg, uint16(len(d.tag)))
	copy(cfg[2:], d.tag)
	for i := range data {
		data[i] = 0
		if o := offset + uint64(i); o < uint64(len(cfg)) {
			data[i] = cfg[o]
		}
	}
}

// WriteConfig implements virtio.Device: the config is read-only.
func (d *Device) WriteConfig(offset uint64, data []byte) {}

// Activate implements virtio.Device: a fresh 9P session (no fids)
// and the worker that serves the queue.
func (d *Device) Activate(a virtio.Activation) error {
	if len(a.Queues) != 1 || a.Queues[0] == nil || len(a.Kicks) != 1 {
		return fmt.Errorf("virtio-9p: the driver did not enable the request queue")
	}
	w, err := newWorker(d, a)
	if err != nil {
		return err
	}
	d.mu.Lock()
	old := d.w
	d.w = w
	d.mu.Unlock()
	if old != nil {
		old.stop()
	}
	w.start()
	return nil
}

// Reset implements virtio.Device. It returns once the worker is
// gone and no reply can reach guest memory any more; a file operation
// still blocked in the host (a FIFO, say) finishes in the background and
// its reply is dropped.
func (d *Device) Reset() {
	d.mu.Lock()
	w := d.w
	d.w = nil
	d.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// Stats are the device's counters.
type Stats struct {
	Tag       string
	Requests  uint64 // chains served
	Malformed uint64 // requests answered by the device itself (bad framing, too big, no room)
	BytesIn   uint64 // request bytes read from the guest
	BytesOut  uint64 // reply bytes written to the guest
}

// Stats returns the counters.
func (d *Device) Stats() Stats {
	return Stats{Tag: d.tag, Requests: d.stats.requests.Load(), Malformed: d.stats.malformed.Load(),
		BytesIn: d.stats.bytesIn.Load(), BytesOut: d.stats.bytesOut.Load()}
}
