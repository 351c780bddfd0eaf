package usernetd

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"tinyvmm/userproc"
)

// maxVnetHdr is the largest struct virtio_net_hdr the device puts in front
// of a frame (12 bytes with num_buffers).
const maxVnetHdr = 12

// ethHeaderLen is the least a frame must hold: the link reads both MACs
// and the type without checking the length.
const ethHeaderLen = 14

// frameConn is the gateway's end of the link: one Read is one Ethernet
// frame from the guest, one writeFrame one frame to it. Under it is the
// other end of the device's socketpair, where each message carries the
// device's vnet header first: Read takes it off (a TSO super-frame or a
// partial checksum it announces needs nothing more: see userproc.Offloads),
// and writeFrame puts on the one the link made (zeros for a whole frame
// with its checksum done).
type frameConn struct {
	*net.UnixConn
	hdrLen *atomic.Int32
	filter *guestFilter
	tx     *txBatcher

	closeOnce sync.Once

	guestOffloads atomic.Uint32 // TUNSETOFFLOAD flags the guest takes (OffloadMsg)

	dropped atomic.Uint64 // guest frames too short for Ethernet or cut short
}

// Read returns the next frame the guest sent that is at least an Ethernet
// header long and that the filter allows; shorter or truncated ones are
// dropped and counted, the filter counts its own.
func (c *frameConn) Read(b []byte) (int, error) {
	var hdr [maxVnetHdr]byte
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	for {
		h := hdr[:c.hdrLen.Load()]
		var n, flags int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, flags, rerr = recvmsg(int(fd), h, b)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err == nil {
			err = rerr
		}
		switch {
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF // the device's end is closed
		case n == 2 && flags&unix.MSG_TRUNC == 0 && byteAt(h, b, 0) == userproc.HdrSizeMsg:
			// The device in another process says how long the headers
			// that follow are (userproc.Backend.SetVnetHdrSize).
			if sz := byteAt(h, b, 1); sz <= maxVnetHdr {
				c.hdrLen.Store(int32(sz))
			}
			continue
		case n == 2 && flags&unix.MSG_TRUNC == 0 && byteAt(h, b, 0) == userproc.OffloadMsg:
			// Which offloads the guest takes (userproc.Backend.SetOffload).
			c.guestOffloads.Store(uint32(byteAt(h, b, 1)))
			continue
		case n < len(h)+ethHeaderLen || flags&unix.MSG_TRUNC != 0:
			c.dropped.Add(1)
			continue
		}
		if !c.filter.allow(b[:n-len(h)]) {
			continue
		}
		traceFrame(trLinkRx, b[:n-len(h)])
		return n - len(h), nil
	}
}

// byteAt is byte i of a message read into h, then b.
func byteAt(h, b []byte, i int) byte {
	if i < len(h) {
		return h[i]
	}
	if i-len(h) < len(b) {
		return b[i-len(h)]
	}
	return 0
}

// writeFrame sends the frame made of parts behind h, a vnet header of
// the current size.
func (c *frameConn) writeFrame(h []byte, parts ...[]byte) (int, error) {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if c.tx != nil {
		if err := c.tx.write(h, parts...); err != nil {
			return 0, err
		}
		return size, nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		n, werr = sendmsg(int(fd), append([][]byte{h}, parts...))
		return !errors.Is(werr, unix.EAGAIN)
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return 0, err
	}
	return max(n-len(h), 0), nil
}

// Close closes the socket, which ends a send waiting for room, then the
// batcher.
func (c *frameConn) Close() error {
	err := c.UnixConn.Close()
	if c.tx != nil {
		c.closeOnce.Do(c.tx.stop)
	}
	return err
}
