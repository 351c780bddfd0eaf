package virtionet_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/internal/netnstest"
	"tinyvmm/netbackend"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

// A device of two pairs on a multi-queue tap: UDP from 32 host flows to
// the guest lands on both pairs' rx queues (the tap spreads flows over
// its queues), and a datagram the guest sends on each pair reaches the
// host socket, each counted on its own pair. A single-queue tap refuses
// queues=2 in one line that says how to make one that takes it.
func TestTapMultiQueue(t *testing.T) {
	ns := netnstest.Setup(t)
	hostMAC, err := ns.AddMultiQueueTap("tvmq0", "10.0.2.1/24")
	if err != nil {
		t.Fatal(err)
	}
	var dev *virtionet.Device
	if err := ns.Do(func() error {
		if netbackend.SingleQueueTap("tvmq0") {
			t.Errorf("a multi-queue tap taken for a single-queue one")
		}
		dev, err = openTap(virtionet.Config{Ifname: "tvmq0", Queues: 2, IO: virtionet.IOWritev, Tuning: virtionet.DefaultTuning()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := guestdrv.NewMulti(dev, guestdrv.Options{IP: guestIP}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	sock := udpSocketIn(t, ns, 9000)
	for p, g := range m.Pairs {
		out := ethframe.AppendUDP(nil, hostMAC, g.MAC, guestIP, hostIP, uint16(4000+p), 9000, []byte{'p', byte('0' + p)})
		if err := g.Send(out, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	buf := make([]byte, 100)
	for range 2 {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		if err != nil {
			t.Fatalf("host socket: %v\n%s", err, dev.Stats())
		}
		got[string(buf[:n])] = true
	}
	if !got["p0"] || !got["p1"] {
		t.Fatalf("host got %v", got)
	}

	// 32 flows host -> guest, while each pair's goroutine polls its ring
	// (and answers the kernel's ARP request on whichever pair it lands).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, g := range m.Pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				g.Poll(nil)
				g.Wait(time.Millisecond)
			}
		}()
	}
	if err := ns.Do(func() error {
		for port := range 32 {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 1}, Port: 20000 + port})
			for range 3 { // the first may wait for ARP
				unix.Sendto(fd, []byte("flow"), 0, &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 15}, Port: 7})
				time.Sleep(time.Millisecond)
			}
			unix.Close(fd)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	var s virtionet.Stats
	for {
		s = dev.Stats()
		if s.Pairs[0].Queues[0].Frames > 0 && s.Pairs[1].Queues[0].Frames > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for p := range 2 {
		rx, tx := s.Pairs[p].Queues[0], s.Pairs[p].Queues[1]
		t.Logf("pair %d: rx %d frames, tx %d frames", p, rx.Frames, tx.Frames)
		if rx.Frames == 0 || tx.Frames == 0 {
			t.Errorf("pair %d: rx %d tx %d frames; want both on both pairs\n%s", p, rx.Frames, tx.Frames, s)
		}
	}
	if s.Queues[0].Frames != s.Pairs[0].Queues[0].Frames+s.Pairs[1].Queues[0].Frames {
		t.Errorf("rx total %d is not the pairs' sum", s.Queues[0].Frames)
	}

	// The multi-queue tap also takes a device of one pair.
	dev.Close()
	if err := ns.Do(func() error {
		d, err := openTap(virtionet.Config{Ifname: "tvmq0", Queues: 1, IO: virtionet.IOWritev})
		if err == nil {
			err = d.Close()
		}
		return err
	}); err != nil {
		t.Errorf("one pair on a multi-queue tap: %v", err)
	}

	// A single-queue tap and queues=2: one line naming multi_queue.
	if _, err := ns.AddTap("tvsq0", "10.0.3.1/24"); err != nil {
		t.Fatal(err)
	}
	err = ns.Do(func() error {
		if !netbackend.SingleQueueTap("tvsq0") {
			t.Errorf("a single-queue tap not taken for one: the VMM would default it to more pairs")
		}
		d, err := openTap(virtionet.Config{Ifname: "tvsq0", Queues: 2, IO: virtionet.IOWritev})
		if err == nil {
			d.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "multi_queue") || strings.Contains(err.Error(), "\n") {
		t.Errorf("queues=2 on a single-queue tap: %v", err)
	}
}
