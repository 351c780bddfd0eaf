package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// PingResult holds the round trips of one ping series.
type PingResult struct {
	Sent int
	RTTs []time.Duration
}

// PingStats are the latency figures of a series, in microseconds.
type PingStats struct {
	Min, Avg, P99, Max float64
	Lost               int
}

// Stats summarizes the series; p99 is the nearest-rank percentile.
func (p PingResult) Stats() PingStats {
	s := PingStats{Lost: p.Sent - len(p.RTTs)}
	if len(p.RTTs) == 0 {
		return s
	}
	r := slices.Clone(p.RTTs)
	slices.Sort(r)
	var sum time.Duration
	for _, d := range r {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	rank := (99*len(r) + 99) / 100
	s.Min, s.Max = us(r[0]), us(r[len(r)-1])
	s.Avg = us(sum / time.Duration(len(r)))
	s.P99 = us(r[rank-1])
	return s
}

// Ping sends count ICMP echo requests to dst from inside the namespace, one
// every interval, waiting at most timeout for each reply; the whole series
// stops at maxTotal.
func Ping(ns *Namespace, dst net.IP, count int, interval, timeout, maxTotal time.Duration) (PingResult, error) {
	var res PingResult
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		if err != nil {
			return fmt.Errorf("raw ICMP socket: %w (run as root)", err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrInet4{}
		copy(to.Addr[:], dst.To4())
		id := uint16(os.Getpid())
		begin := time.Now()
		buf := make([]byte, 1500)
		for i := 0; i < count && time.Since(begin) < maxTotal; i++ {
			next := time.Now().Add(interval)
			req := make([]byte, 64)
			req[0] = 8 // echo request
			binary.BigEndian.PutUint16(req[4:], id)
			binary.BigEndian.PutUint16(req[6:], uint16(i))
			binary.BigEndian.PutUint16(req[2:], ipChecksum(req))
			sentAt := time.Now()
			if err := unix.Sendto(fd, req, 0, to); err != nil {
				return fmt.Errorf("send ping: %w", err)
			}
			res.Sent++
			if rtt, ok := awaitReply(fd, buf, id, uint16(i), sentAt, timeout); ok {
				res.RTTs = append(res.RTTs, rtt)
			}
			time.Sleep(time.Until(next))
		}
		return nil
	})
	return res, err
}

func awaitReply(fd int, buf []byte, id, seq uint16, sentAt time.Time, timeout time.Duration) (time.Duration, bool) {
	deadline := sentAt.Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return 0, false
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, false
		}
		now := time.Now()
		p := buf[:n]
		if len(p) < 20 {
			continue
		}
		ihl := int(p[0]&0xf) * 4
		if len(p) < ihl+8 {
			continue
		}
		icmp := p[ihl:]
		if icmp[0] == 0 && binary.BigEndian.Uint16(icmp[4:]) == id && binary.BigEndian.Uint16(icmp[6:]) == seq {
			return now.Sub(sentAt), true
		}
	}
}
