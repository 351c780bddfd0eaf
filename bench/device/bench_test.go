package device

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/virtionet"
)

// benchCases are the backends and feature sets of the frames/s
// benchmarks: a tap with everything it accepts or with no checksum/TSO
// offloads, the same with io=uring, and af_packet (which has none);
// mergeable buffers in all.
var benchCases = []struct {
	name     string
	afPacket bool
	io       virtionet.IOMode
	feat     uint64
}{
	{"tap/offloads=on", false, virtionet.IOWritev, 0},
	{"tap/offloads=off", false, virtionet.IOWritev, rxFeatures | virtionet.FeatMrgRxBuf},
	{"tap+uring/offloads=on", false, virtionet.IOUring, 0},
	{"tap+uring/offloads=off", false, virtionet.IOUring, rxFeatures | virtionet.FeatMrgRxBuf},
	{"af_packet", true, virtionet.IOWritev, rxFeatures | virtionet.FeatMrgRxBuf},
}

// waitFrames waits until counter() has grown by n, or 30 s.
func waitFrames(counter func() uint64, n uint64) {
	start := counter()
	deadline := time.Now().Add(30 * time.Second)
	for counter()-start < n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
}

// txEnv opens a device for the tx benchmarks, with a UDP socket on the
// host's port 9 taking what the guest sends (closed with the device at
// the benchmark's end), and builds the guest's frame of size bytes to it.
func txEnv(b *testing.B, afPacket bool, io virtionet.IOMode, tuning virtionet.Tuning, features uint64, size int) (*Env, []byte) {
	env, err := newEnvIO(afPacket, io, tuning, features)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	sink, err := env.UDPSocket(9, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(sink) })
	payload := make([]byte, size-ethframe.EthLen-ethframe.IPv4Len-ethframe.UDPLen)
	return env, ethframe.AppendUDP(nil, env.HostMAC, env.Guest.MAC, GuestIP, HostIP, 5000, 9, payload)
}

// BenchmarkTx: the Go driver floods UDP frames through the device and the
// backend to a socket in the namespace.
func BenchmarkTx(b *testing.B) {
	skipUnlessNetns(b)
	for _, oc := range benchCases {
		for _, size := range []int{64, 1514} {
			b.Run(fmt.Sprintf("%s/frame=%d", oc.name, size), func(b *testing.B) {
				env, frame := txEnv(b, oc.afPacket, oc.io, virtionet.DefaultTuning(), oc.feat, size)
				txFrames := func() uint64 { return env.Dev.Stats().Queues[1].Frames }
				cpu := func() uint64 { return env.Dev.Stats().WorkerCPUNs }
				var stop atomic.Bool
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { defer wg.Done(); guestFlood(env.Guest, frame, &stop) }()
				waitFrames(txFrames, 1000)
				b.ResetTimer()
				calls := func() uint64 { return env.Dev.Stats().Queues[1].Syscalls }
				start, t0, c0, s0 := txFrames(), time.Now(), cpu(), calls()
				waitFrames(txFrames, uint64(b.N))
				n := float64(txFrames() - start)
				b.ReportMetric(n/time.Since(t0).Seconds(), "frames/s")
				b.ReportMetric(float64(cpu()-c0)/n, "worker-ns/frame")
				b.ReportMetric(n/float64(calls()-s0), "frames/syscall")
				b.StopTimer()
				stop.Store(true)
				wg.Wait()
			})
		}
	}
}

// BenchmarkRx: an AF_PACKET sender on the host side of the link floods
// UDP frames that the device delivers into the Go driver's rx buffers.
func BenchmarkRx(b *testing.B) {
	skipUnlessNetns(b)
	for _, oc := range benchCases {
		for _, size := range []int{64, 1514} {
			b.Run(fmt.Sprintf("%s/frame=%d", oc.name, size), func(b *testing.B) {
				env, err := newEnvIO(oc.afPacket, oc.io, virtionet.DefaultTuning(), oc.feat)
				if err != nil {
					b.Fatal(err)
				}
				defer env.Close()
				fd, err := env.PacketSocket()
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(fd)
				payload := make([]byte, size-ethframe.EthLen-ethframe.IPv4Len-ethframe.UDPLen)
				frame := ethframe.AppendUDP(nil, env.Guest.MAC, env.HostMAC, HostIP, GuestIP, 5000, 9, payload)
				rxFrames := func() uint64 { return env.Dev.Stats().Queues[0].Frames }
				cpu := func() uint64 { return env.Dev.Stats().WorkerCPUNs }
				var stopSend, stopSink atomic.Bool
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); hostFlood(fd, [][]byte{frame}, &stopSend) }()
				go func() { defer wg.Done(); guestSink(env.Guest, &stopSink) }()
				waitFrames(rxFrames, 1000)
				b.ResetTimer()
				calls := func() uint64 { return env.Dev.Stats().Queues[0].Syscalls }
				start, t0, c0, s0 := rxFrames(), time.Now(), cpu(), calls()
				waitFrames(rxFrames, uint64(b.N))
				n := float64(rxFrames() - start)
				b.ReportMetric(n/time.Since(t0).Seconds(), "frames/s")
				b.ReportMetric(float64(cpu()-c0)/n, "worker-ns/frame")
				b.ReportMetric(n/float64(calls()-s0), "frames/syscall")
				b.StopTimer()
				stopSend.Store(true)
				stopSink.Store(true)
				wg.Wait()
			})
		}
	}
}

// BenchmarkLoneRoundTrip: a host socket sends one UDP request at a time
// to the Go driver's echo port and waits for the answer, as a ping or a
// TCP_RR turn does. Every frame is alone, so each costs the worker a
// wakeup and a run of its own: worker-ns/rt is the device's CPU per turn,
// which on a host shared with the peer (a nested L1, a busy server) is
// time the peer waits.
func BenchmarkLoneRoundTrip(b *testing.B) {
	skipUnlessNetns(b)
	for _, io := range []virtionet.IOMode{virtionet.IOUring, virtionet.IOWritev} {
		b.Run("io="+string(io), func(b *testing.B) {
			env, err := newEnvIO(false, io, virtionet.DefaultTuning(), 0)
			if err != nil {
				b.Fatal(err)
			}
			defer env.Close()
			pinger, err := env.UDPSocket(7000, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(pinger)
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); guestSink(env.Guest, &stop) }()
			defer func() { stop.Store(true); wg.Wait() }()
			to := &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 15}, Port: ethframe.EchoPort}
			buf := make([]byte, 64)
			turn := func(seq uint64) {
				var req [8]byte
				binary.BigEndian.PutUint64(req[:], seq)
				if err := unix.Sendto(pinger, req[:], 0, to); err != nil {
					b.Fatal(err)
				}
				for {
					n, _, err := unix.Recvfrom(pinger, buf, 0)
					if err == unix.EINTR {
						continue
					}
					if err != nil {
						b.Fatalf("turn %d: %v", seq, err)
					}
					if n == 8 && binary.BigEndian.Uint64(buf) == seq {
						return
					}
				}
			}
			for i := range 100 { // ARP, and the worker's first runs
				turn(uint64(i))
			}
			stats := func() (cpu, calls, kicks uint64) {
				s := env.Dev.Stats()
				return s.WorkerCPUNs, s.Queues[0].Syscalls + s.Queues[1].Syscalls, s.Queues[0].Kicks + s.Queues[1].Kicks
			}
			c0, s0, k0 := stats()
			b.ResetTimer()
			for i := range b.N {
				turn(uint64(1000 + i))
			}
			b.StopTimer()
			c1, s1, k1 := stats()
			b.ReportMetric(float64(c1-c0)/float64(b.N), "worker-ns/rt")
			b.ReportMetric(float64(k1-k0)/float64(b.N), "kicks/rt")
			b.ReportMetric(float64(s1-s0)/float64(b.N), "backend-syscalls/rt")
		})
	}
}
