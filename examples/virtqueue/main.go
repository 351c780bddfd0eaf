// Command virtqueue is stage 5 of GUIDE.md: a virtio driver and tinyvmm's
// virtio-net device exchanging one frame each way over split virtqueues,
// with no VM at all. The driver is virtio/virtiotest, written in Go; it
// plays the guest over a byte slice that stands for guest memory. The
// device is the real one (virtionet), with its worker thread; its backend
// is a socketpair whose other end plays the host.
//
//	go run ./examples/virtqueue
package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/internal/syncbuf"
	"tinyvmm/netbackend"
	"tinyvmm/virtio/virtiotest"
	"tinyvmm/virtionet"
)

// The two ends of the link.
var (
	guestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	hostMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0xab, 0xcd, 0xef}
	guestIP  = net.IPv4(10, 0, 2, 15).To4()
	hostIP   = net.IPv4(10, 0, 2, 1).To4()
)

const (
	queueSize = 8
	// vnetHdrLen is struct virtio_net_hdr with num_buffers: what a
	// VERSION_1 driver puts in front of every frame (virtio 1.2, 5.1.6).
	vnetHdrLen = 12
	// features are what this driver acks: virtio 1.x and mergeable rx
	// buffers, as Linux's driver would (without offloads).
	features = virtionet.FeatVersion1 | virtionet.FeatMrgRxBuf
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "virtqueue:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	// The backend: a SOCK_SEQPACKET socketpair, one frame per message
	// and per writev or readv, like a tap. sp.Peer is the host's end.
	sp, err := netbackend.NewSocketPair()
	if err != nil {
		return err
	}
	sp.SingleFrame = true
	defer unix.Close(sp.Peer)
	var trace syncbuf.Buffer
	dev, err := virtionet.New(virtionet.Config{
		Ifname: "example", MAC: guestMAC, IO: virtionet.IOWritev, Tuning: virtionet.DefaultTuning(), Trace: &trace,
	}, sp)
	if err != nil {
		return err
	}
	defer dev.Close()

	// The driver lays out both queues in its 1 MiB of "guest memory":
	// descriptor table, avail ring, used ring, and a buffer per
	// descriptor (virtio 1.2, 2.7).
	drv := virtiotest.New(1 << 20)
	defer drv.Close()
	rx, err := drv.NewQueue(queueSize, virtiotest.RingOptions{})
	if err != nil {
		return err
	}
	tx, err := drv.NewQueue(queueSize, virtiotest.RingOptions{})
	if err != nil {
		return err
	}
	for _, q := range []struct {
		name string
		r    *virtiotest.Ring
	}{{"rx", rx}, {"tx", tx}} {
		fmt.Fprintf(out, "driver: %s queue of %d: descriptors at %#x, avail ring at %#x, used ring at %#x\n",
			q.name, q.r.Size, q.r.DescAddr, q.r.AvailAddr, q.r.UsedAddr)
	}
	// DRIVER_OK: the device gets the queues, a kick eventfd and an
	// interrupt per queue, and starts its worker.
	if err := dev.Activate(drv.Activation(features, rx, tx)); err != nil {
		return err
	}
	fmt.Fprintf(out, "driver: DRIVER_OK with features %#x; the device's worker runs\n", uint64(features))

	// Guest to host: a virtio_net_hdr (all zero: no offloads) and a UDP
	// datagram to the host's echo port, in two readable descriptors.
	frame := ethframe.AppendUDP(nil, hostMAC, guestMAC, guestIP, hostIP, 40000, ethframe.EchoPort, []byte("hello, device"))
	head, err := tx.AddChain([][]byte{make([]byte, vnetHdrLen), frame}, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "driver: tx chain at head %d (%d-byte header + %d-byte frame); avail.idx is now %d\n",
		head, vnetHdrLen, len(frame), tx.AvailIdx())
	txKick := tx.Kick() // false when the device, still at work, asked for no kick (EVENT_IDX)
	fmt.Fprintf(out, "driver: kick tx: %v (an eventfd write; in a VM, KVM does it on the notify write)\n", txKick)

	got, err := peerRead(sp.Peer)
	if err != nil {
		return err
	}
	if !bytes.Equal(got[vnetHdrLen:], frame) {
		return fmt.Errorf("the host got %x, want %x", got, frame)
	}
	fmt.Fprintf(out, "host:   read %d bytes: the header and the frame, unchanged\n", len(got))
	if !tx.Irq.Wait(5 * time.Second) {
		return fmt.Errorf("no tx interrupt within 5 s")
	}
	used, err := waitUsed(tx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "driver: tx interrupt; used element id %d len %d: the chain is back, its buffers free\n", used.ID, used.Len)

	// Host to guest: the driver posts empty buffers first; the device
	// reads the backend only while there are some.
	if _, err := rx.AddRxBuffers(queueSize, 2048); err != nil {
		return err
	}
	kicked := rx.Kick() // false when the device, still at work, asked for no kick (EVENT_IDX)
	fmt.Fprintf(out, "driver: %d rx buffers of 2048 bytes posted; kick rx: %v\n", queueSize, kicked)
	reply, ok := ethframe.AppendReply(make([]byte, vnetHdrLen), got[vnetHdrLen:], hostMAC, hostIP)
	if !ok {
		return fmt.Errorf("the host has no answer to the guest's frame")
	}
	if _, err := unix.Write(sp.Peer, reply); err != nil {
		return err
	}
	fmt.Fprintf(out, "host:   wrote the %d-byte echo reply\n", len(reply)-vnetHdrLen)
	if !rx.Irq.Wait(5 * time.Second) {
		return fmt.Errorf("no rx interrupt within 5 s")
	}
	used, err = waitUsed(rx)
	if err != nil {
		return err
	}
	buf := rx.ReadBuf(used, nil)
	p, ok := ethframe.Parse(buf[vnetHdrLen:])
	if !ok || string(p.Payload) != "hello, device" {
		return fmt.Errorf("the guest got %x", buf)
	}
	fmt.Fprintf(out, "driver: rx interrupt; used element id %d len %d: UDP from %v port %d: %q\n",
		used.ID, used.Len, p.SrcIP, p.SrcPort, p.Payload)

	// The worker counts (and traces) a kick when it reads the kick's
	// eventfd, which can come after it served the chain (woken by the
	// backend, or at its first look): wait until it has read every kick
	// the driver sent, so that the counters and the trace are complete.
	st, err := waitKicks(dev, kicked, txKick)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "device counters: tx %d frame(s) %d kick(s) %d interrupt(s); rx %d frame(s) %d kick(s) %d interrupt(s)\n",
		st.Queues[1].Frames, st.Queues[1].Kicks, st.Queues[1].Interrupts,
		st.Queues[0].Frames, st.Queues[0].Kicks, st.Queues[0].Interrupts)
	fmt.Fprintf(out, "device trace (virtionet/trace.go, tinyvmm run --trace):\n")
	for _, line := range strings.SplitAfter(trace.String(), "\n") {
		if line != "" {
			fmt.Fprintf(out, "  %s", line)
		}
	}
	return nil
}

// waitKicks waits up to 5 s until the device has counted the kicks the
// driver sent (rx, tx: whether it kicked) and returns its counters.
func waitKicks(dev *virtionet.Device, rx, tx bool) (virtionet.Stats, error) {
	want := func(kicked bool) uint64 {
		if kicked {
			return 1
		}
		return 0
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st := dev.Stats()
		if st.Queues[0].Kicks >= want(rx) && st.Queues[1].Kicks >= want(tx) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("the device read %d rx and %d tx kick(s) in 5 s; the driver sent %d and %d",
				st.Queues[0].Kicks, st.Queues[1].Kicks, want(rx), want(tx))
		}
	}
}

// peerRead waits up to 5 s for the frame the device sends.
func peerRead(fd int) ([]byte, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 5000); err != nil || n == 0 {
		return nil, fmt.Errorf("no frame from the device within 5 s (poll: %v)", err)
	}
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// waitUsed polls the used ring for one element, as a driver does after
// its interrupt.
func waitUsed(r *virtiotest.Ring) (virtiotest.UsedElem, error) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if u := r.Used(); len(u) > 0 {
			return u[0], nil
		}
	}
	return virtiotest.UsedElem{}, fmt.Errorf("nothing in the used ring within 5 s")
}
