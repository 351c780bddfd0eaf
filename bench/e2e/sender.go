package e2e

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/schedstat"
)

// SendResult is what a host-side flood sent.
type SendResult struct {
	Sent     uint64
	Dropped  uint64 // frames the tap dropped, its queue full (pktgen counts them)
	Duration time.Duration
	CPU      time.Duration // the sending thread's CPU time (ns.Do keeps it on one)
}

// sendFunc is a host-side flood: SendFlood or PktgenFlood.
type sendFunc func(ns *Namespace, dstMAC net.HardwareAddr, size int, dur time.Duration, maxFrames uint64) (SendResult, error)

// SendFlood sends bench frames of size bytes to dstMAC through the
// namespace's tap for dur or maxFrames, whichever ends first.
func SendFlood(ns *Namespace, dstMAC net.HardwareAddr, size int, dur time.Duration, maxFrames uint64) (SendResult, error) {
	if size < FrameMin || size > FrameMax {
		return SendResult{}, fmt.Errorf("frame size %d outside %d..%d", size, FrameMin, FrameMax)
	}
	var res SendResult
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(TapName)
		if err != nil {
			return err
		}
		sock, err := openPacketSocket(TapName)
		if err != nil {
			return err
		}
		defer sock.Close()
		batch := make([][]byte, packetBatch)
		for i := range batch {
			batch[i] = make([]byte, size)
		}
		tid := unix.Gettid()
		start, cpu0 := time.Now(), schedstat.ThreadCPU(tid)
		var seq uint64
		for seq < maxFrames && time.Since(start) < dur {
			n := min(uint64(len(batch)), maxFrames-seq)
			for i := uint64(0); i < n; i++ {
				BuildFrame(batch[i], seq+i, ifi.HardwareAddr, dstMAC, HostIP, GuestIP)
			}
			sent, err := sock.send(batch[:n])
			if err != nil {
				return err
			}
			seq += uint64(sent)
			if sent == 0 {
				time.Sleep(50 * time.Microsecond) // the queue is full
			}
		}
		res = SendResult{Sent: seq, Duration: time.Since(start), CPU: time.Duration(schedstat.ThreadCPU(tid) - cpu0)}
		return nil
	})
	return res, err
}
