package virtionet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// The control virtqueue (virtio 1.2, 5.1.6.5): each chain is a command,
//
//	struct virtio_net_ctrl { u8 class; u8 command; u8 data[]; u8 ack; }
//
// class, command and data device-readable, ack device-writable. tinyvmm
// knows one command, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET; every other class
// or command, and a bad length or value, is answered VIRTIO_NET_ERR. The
// chains are guest input: nothing in them can do more than get an error.

// Control classes, commands and answers (linux/virtio_net.h).
const (
	ctrlClassMQ      = 4 // VIRTIO_NET_CTRL_MQ
	ctrlMQPairsSet   = 0 // VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET
	ctrlOK           = 0 // VIRTIO_NET_OK
	ctrlErr          = 1 // VIRTIO_NET_ERR
	ctrlPairsSetLen  = 4 // class, command, le16 virtqueue_pairs
	ctrlMaxCmdLen    = 64
	ctrlQueueSize    = 64 // Linux sends one command at a time
	ctrlMaxPerWakeup = 256
)

// ctrlQueue serves the control queue on a goroutine of its own: commands
// are rare, and VQ_PAIRS_SET stops and starts workers, which no worker can
// do for itself.
type ctrlQueue struct {
	d        *Device
	q        *virtio.Queue
	kick     int
	irq      virtio.Interrupt
	fail     func(error)
	stopfd   int
	stopping atomic.Bool
	done     chan struct{}
	cmd      [ctrlMaxCmdLen]byte
}

func newCtrlQueue(d *Device, a virtio.Activation, qi int) (*ctrlQueue, error) {
	c := &ctrlQueue{d: d, q: a.Queues[qi], kick: a.Kicks[qi], fail: a.Fail, done: make(chan struct{})}
	if qi < len(a.Interrupts) {
		c.irq = a.Interrupts[qi]
	}
	if c.fail == nil {
		c.fail = func(error) {}
	}
	c.q.EventIdx = a.Features&FeatEventIdx != 0
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("net %s: control queue: eventfd: %v", d.cfg.Ifname, err)
	}
	c.stopfd = fd
	return c, nil
}

func (c *ctrlQueue) start() { go c.run() }

// stop ends the loop and waits until it has left guest memory alone.
func (c *ctrlQueue) stop() {
	c.stopping.Store(true)
	one := [8]byte{1}
	unix.Write(c.stopfd, one[:])
	<-c.done
	unix.Close(c.stopfd)
}

func (c *ctrlQueue) run() {
	defer close(c.done)
	fds := []unix.PollFd{{Fd: int32(c.kick), Events: unix.POLLIN}, {Fd: int32(c.stopfd), Events: unix.POLLIN}}
	for !c.serve() {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			c.fail(fmt.Errorf("net %s: control queue: poll: %v", c.d.cfg.Ifname, err))
			return
		}
		if fds[1].Revents != 0 || c.stopping.Load() {
			return
		}
		drainFd(c.kick)
	}
}

// serve answers every command waiting, then turns kicks back on. It
// returns true when the loop must end (stop, or a broken queue).
func (c *ctrlQueue) serve() bool {
	c.q.DisableNotify()
	for n := 0; ; n++ {
		if c.stopping.Load() {
			return true
		}
		ch, ok, err := c.q.Pop()
		if err != nil {
			c.fail(fmt.Errorf("net %s control queue: %w", c.d.cfg.Ifname, err))
			return true
		}
		if !ok || n >= ctrlMaxPerWakeup {
			if ok {
				c.q.Rewind(1)
			}
			c.publish()
			if n >= ctrlMaxPerWakeup || c.q.EnableNotify() {
				c.q.DisableNotify()
				n = 0
				continue
			}
			return false
		}
		c.q.AddUsed(ch.Head, c.command(ch))
	}
}

func (c *ctrlQueue) publish() {
	c.q.PublishUsed()
	if c.irq != nil && c.q.NeedsInterrupt() {
		c.irq.Trigger()
	}
}

// command runs one command chain and writes its answer; it returns the
// bytes written (1, or 0 when the chain has nowhere to put it).
func (c *ctrlQueue) command(ch virtio.Chain) uint32 {
	in, ack := 0, []byte(nil)
	for _, b := range ch.Bufs {
		buf := b.Buf
		if b.Write {
			if ack == nil && len(buf) > 0 {
				ack = buf[:1]
			}
			continue
		}
		if in < len(c.cmd) {
			copy(c.cmd[in:], buf)
		}
		in += len(buf)
	}
	if ack == nil {
		c.d.ctrlStats.unanswerable.Add(1) // given back unanswered; the queue goes on
		return 0
	}
	ack[0] = c.d.ctrlCommand(c.cmd[:min(in, len(c.cmd))], in)
	return 1
}

// ctrlCommand runs a command whose first readable bytes are cmd (of in
// readable bytes in all) and returns its answer.
func (d *Device) ctrlCommand(cmd []byte, in int) byte {
	d.ctrlStats.commands.Add(1)
	if err := d.runCtrl(cmd, in); err != nil {
		if d.ctrlStats.errors.Add(1) == 1 { // once: a guest could repeat it forever
			d.cfg.Log("net %s: control command answered with an error: %v", d.cfg.Ifname, err)
		}
		return ctrlErr
	}
	return ctrlOK
}

func (d *Device) runCtrl(cmd []byte, in int) error {
	if in < 2 {
		return fmt.Errorf("%d bytes, shorter than class and command", in)
	}
	class, command := cmd[0], cmd[1]
	if class != ctrlClassMQ || command != ctrlMQPairsSet {
		return fmt.Errorf("class %d command %d not supported", class, command)
	}
	if in != ctrlPairsSetLen {
		return fmt.Errorf("VQ_PAIRS_SET of %d bytes, want %d", in, ctrlPairsSetLen)
	}
	d.pairsMu.Lock()
	mq := d.act != nil && d.act.Features&FeatMQ != 0
	d.pairsMu.Unlock()
	if !mq {
		return errors.New("VQ_PAIRS_SET without MQ negotiated")
	}
	return d.setPairs(int(binary.LittleEndian.Uint16(cmd[2:])))
}
