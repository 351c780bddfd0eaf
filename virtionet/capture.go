package virtionet

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"
)

// Packet capture (Config.Pcap, --net ...,pcap=FILE): every frame the
// device moves, both directions, vnet header stripped, as pcap (Ethernet,
// nanosecond timestamps). The worker copies each frame into a block from
// a fixed pool and hands full blocks, and the one it holds whenever it is
// about to sleep, to a writer goroutine. When every block waits for the
// disk the frame is not captured and is counted: the datapath never waits.
const (
	captureBlockSize = 256 << 10
	captureBlocks    = 16 // 4 MiB of frames in flight at most
	captureSnapLen   = maxGSOFrame
	captureRecHdr    = 16 // timestamp ns, frame length, captured length
)

type capture struct {
	path string
	f    *os.File
	bw   *bufio.Writer
	pw   *pcapgo.Writer
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
		path: path, f: f, bw: bufio.NewWriterSize(f, 1<<20), log: log,
		free: make(chan []byte, captureBlocks), full: make(chan []byte, captureBlocks),
		done: make(chan struct{}),
	}
	c.pw = pcapgo.NewWriterNanos(c.bw)
	if err := c.pw.WriteFileHeader(captureSnapLen, layers.LinkTypeEthernet); err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
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
	b := binary.LittleEndian.AppendUint64(c.cur, uint64(now.UnixNano()))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = binary.LittleEndian.AppendUint32(b, uint32(take))
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

// writer writes blocks as they come, flushing the file whenever it has
// caught up, and gives them back. After a write error it only gives them
// back (one notice): the datapath goes on.
func (c *capture) writer() {
	defer close(c.done)
	for blk := range c.full {
		if c.err == nil {
			c.err = c.writeBlock(blk)
			if c.err == nil && len(c.full) == 0 {
				c.err = c.bw.Flush()
			}
			if c.err != nil {
				c.log("net: pcap %s: %v; capture stops", c.path, c.err)
			}
		}
		c.free <- blk[:0]
	}
}

func (c *capture) writeBlock(b []byte) error {
	for len(b) >= captureRecHdr {
		ts := int64(binary.LittleEndian.Uint64(b))
		n := int(binary.LittleEndian.Uint32(b[8:]))
		take := int(binary.LittleEndian.Uint32(b[12:]))
		b = b[captureRecHdr:]
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, ts), CaptureLength: take, Length: n}
		if err := c.pw.WritePacket(ci, b[:take]); err != nil {
			return err
		}
		b = b[take:]
	}
	return nil
}

// close writes what is left and closes the file; the worker must have
// stopped. It is safe to call twice.
func (c *capture) close() error {
	c.once.Do(func() {
		c.flush()
		close(c.full)
		<-c.done
		err := c.err
		if err == nil {
			err = c.bw.Flush()
		}
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
		l.charge(n)
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
