package virtionet

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Packet capture (Config.Pcap, --net ...,pcap=FILE): every frame the
// device moves, both directions, vnet header stripped, as pcap (Ethernet,
// nanosecond timestamps). The worker copies each frame into a block from
// a fixed pool and hands full blocks, and the one it holds whenever it is
// about to sleep, to a writer goroutine. When every block waits for the
// disk the frame is not captured and is counted: the datapath never waits.
//
// The worker writes each record in pcap's own layout, so a block goes to
// the file as it is. The format is two fixed headers (libpcap's
// pcap-savefile(5)); gopacket's pcapgo wrote the same bytes but linked
// gopacket/layers, whose package init (protocol tables) ran in every tinyvmm
// process: 1.5-18 ms of start-up in the nested L1. The tests still read the
// files back with pcapgo and tshark.
const (
	captureBlockSize = 256 << 10
	captureBlocks    = 16 // 4 MiB of frames in flight at most
	captureSnapLen   = maxGSOFrame
	captureRecHdr    = 16 // seconds, nanoseconds, captured length, frame length

	pcapMagicNanos    = 0xa1b23c4d // nanosecond timestamps
	pcapLinkEthernet  = 1
	pcapFileHeaderLen = 24
)

type capture struct {
	path string
	f    *os.File
	log  func(format string, args ...any)

	free chan []byte  // blocks the worker may fill
	full chan []byte  // blocks for the writer; never more than captureBlocks
	cur  []byte       // the block the worker fills (worker only)
	iovs []unix.Iovec // an rx frame's buffers (worker only)
	done chan struct{}
	once sync.Once
	err  error // the writer's first error (writer only, then Close)
}

// openCapture creates the file, writes the pcap header and starts the
// writer.
func openCapture(path string, log func(string, ...any)) (*capture, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pcap: %v", err)
	}
	c := &capture{
		path: path, f: f, log: log,
		free: make(chan []byte, captureBlocks), full: make(chan []byte, captureBlocks),
		done: make(chan struct{}),
	}
	if _, err := f.Write(pcapFileHeader(captureSnapLen)); err != nil {
		f.Close()
		return nil, fmt.Errorf("pcap %s: %v", path, err)
	}
	for range captureBlocks {
		c.free <- make([]byte, 0, captureBlockSize)
	}
	go c.writer()
	return c, nil
}

// add copies n frame bytes from frame, after skip bytes of vnet header,
// into the current block. It returns false when no block was free.
func (c *capture) add(frame []unix.Iovec, skip, n int, now time.Time) bool {
	take := min(n, captureSnapLen)
	if c.cur != nil && len(c.cur)+captureRecHdr+take > cap(c.cur) {
		c.flush()
	}
	if c.cur == nil {
		select {
		case c.cur = <-c.free:
		default:
			return false
		}
	}
	ns := now.UnixNano()
	b := binary.LittleEndian.AppendUint32(c.cur, uint32(ns/1e9))
	b = binary.LittleEndian.AppendUint32(b, uint32(ns%1e9))
	b = binary.LittleEndian.AppendUint32(b, uint32(take))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	for _, v := range frame {
		if take == 0 {
			break
		}
		p := iovecBytes(v)
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		p = p[skip:min(len(p), skip+take)]
		skip = 0
		b = append(b, p...)
		take -= len(p)
	}
	c.cur = b
	return true
}

// flush hands the current block, if it holds anything, to the writer. It
// never blocks: there are only captureBlocks blocks.
func (c *capture) flush() {
	if len(c.cur) > 0 {
		c.full <- c.cur
		c.cur = nil
	}
}

// pcapFileHeader is pcap's file header: nanosecond timestamps, version
// 2.4, UTC, Ethernet frames of at most snaplen bytes.
func pcapFileHeader(snaplen uint32) []byte {
	h := binary.LittleEndian.AppendUint32(make([]byte, 0, pcapFileHeaderLen), pcapMagicNanos)
	h = binary.LittleEndian.AppendUint16(h, 2)
	h = binary.LittleEndian.AppendUint16(h, 4)
	h = binary.LittleEndian.AppendUint32(h, 0) // thiszone
	h = binary.LittleEndian.AppendUint32(h, 0) // sigfigs
	h = binary.LittleEndian.AppendUint32(h, snaplen)
	return binary.LittleEndian.AppendUint32(h, pcapLinkEthernet)
}

// writer writes blocks, whole pcap records, as they come and gives them
// back. After a write error it only gives them back (one notice): the
// datapath goes on.
func (c *capture) writer() {
	defer close(c.done)
	for blk := range c.full {
		if c.err == nil {
			if _, c.err = c.f.Write(blk); c.err != nil {
				c.log("net: pcap %s: %v; capture stops", c.path, c.err)
			}
		}
		c.free <- blk[:0]
	}
}

// close writes what is left and closes the file; the worker must have
// stopped. It is safe to call twice.
func (c *capture) close() error {
	c.once.Do(func() {
		c.flush()
		close(c.full)
		<-c.done
		err := c.err
		if cerr := c.f.Close(); err == nil {
			err = cerr
		}
		c.err = err
	})
	return c.err
}

// captureFrame records a frame that went (tx) or landed (rx) and counts
// it, or counts it as not captured.
func (w *worker) captureFrame(qi int, frame []unix.Iovec, n int) {
	if w.d.capture.add(frame, w.hdrLen, n, time.Now()) {
		w.p.counters[qi].captured.Add(1)
	} else {
		w.p.counters[qi].captureDrops.Add(1)
	}
}

// frameDone is the datapath's hook per frame: a tx frame was sent (frame:
// its iovecs, vnet header first; n: its length without the header). With
// neither capture nor a rate limit it costs two nil checks.
func (w *worker) frameDone(qi int, frame []unix.Iovec, n int) {
	if w.d.capture != nil {
		w.captureFrame(qi, frame, n)
	}
	if l := w.d.limits[qi]; l != nil {
		l.Charge(n)
	}
}

// rxFrameDone is frameDone for an rx frame of got bytes (vnet header
// included) that landed in the pool's next chains; deliver calls it before
// completeChains hands them back.
func (w *worker) rxFrameDone(got int) {
	var frame []unix.Iovec
	if c := w.d.capture; c != nil {
		p := &w.rx
		c.iovs = c.iovs[:0]
		for i, left := p.next, got; left > 0 && i < len(p.chains); i++ {
			ch := p.chains[i]
			c.iovs = append(c.iovs, p.iovs[ch.start:ch.end]...)
			left -= ch.capacity
		}
		frame = c.iovs
	}
	w.frameDone(rxQueue, frame, got-w.hdrLen)
}
