package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/virtionet"
)

// offloadCases are the feature sets of the frames/s benchmarks: everything
// the tap accepts, or no checksum/TSO offloads (mergeable buffers in both).
var offloadCases = []struct {
	name string
	feat uint64
}{
	{"offloads=on", 0},
	{"offloads=off", rxFeatures | virtionet.FeatMrgRxBuf},
}

// waitFrames waits until counter() has grown by n, or 30 s.
func waitFrames(counter func() uint64, n uint64) {
	start := counter()
	deadline := time.Now().Add(30 * time.Second)
	for counter()-start < n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
}

// BenchmarkTapTx: the Go driver floods UDP frames through the device and
// the tap to a socket in the namespace.
func BenchmarkTapTx(b *testing.B) {
	skipUnlessNetns(b)
	for _, oc := range offloadCases {
		for _, size := range []int{64, 1514} {
			b.Run(fmt.Sprintf("%s/frame=%d", oc.name, size), func(b *testing.B) {
				env, err := NewEnv(virtionet.DefaultTuning(), oc.feat)
				if err != nil {
					b.Fatal(err)
				}
				defer env.Close()
				sink, err := env.UDPSocket(9, time.Second)
				if err != nil {
					b.Fatal(err)
				}
				defer unix.Close(sink)
				payload := make([]byte, size-ethframe.EthLen-ethframe.IPv4Len-ethframe.UDPLen)
				frame := ethframe.AppendUDP(nil, env.HostMAC, env.Guest.MAC, GuestIP, HostIP, 5000, 9, payload)
				txFrames := func() uint64 { return env.Dev.Stats().Queues[1].Frames }
				cpu := func() uint64 { return env.Dev.Stats().WorkerCPUNs }
				var stop atomic.Bool
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { defer wg.Done(); guestFlood(env.Guest, frame, &stop) }()
				waitFrames(txFrames, 1000)
				b.ResetTimer()
				start, t0, c0 := txFrames(), time.Now(), cpu()
				waitFrames(txFrames, uint64(b.N))
				n := float64(txFrames() - start)
				b.ReportMetric(n/time.Since(t0).Seconds(), "frames/s")
				b.ReportMetric(float64(cpu()-c0)/n, "worker-ns/frame")
				b.StopTimer()
				stop.Store(true)
				wg.Wait()
			})
		}
	}
}

// BenchmarkTapRx: an AF_PACKET sender on the host side of the tap floods
// UDP frames that the device delivers into the Go driver's rx buffers.
func BenchmarkTapRx(b *testing.B) {
	skipUnlessNetns(b)
	for _, oc := range offloadCases {
		for _, size := range []int{64, 1514} {
			b.Run(fmt.Sprintf("%s/frame=%d", oc.name, size), func(b *testing.B) {
				env, err := NewEnv(virtionet.DefaultTuning(), oc.feat)
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
				go func() { defer wg.Done(); hostFlood(fd, frame, &stopSend) }()
				go func() { defer wg.Done(); guestSink(env.Guest, &stopSink) }()
				waitFrames(rxFrames, 1000)
				b.ResetTimer()
				start, t0, c0 := rxFrames(), time.Now(), cpu()
				waitFrames(rxFrames, uint64(b.N))
				n := float64(rxFrames() - start)
				b.ReportMetric(n/time.Since(t0).Seconds(), "frames/s")
				b.ReportMetric(float64(cpu()-c0)/n, "worker-ns/frame")
				b.StopTimer()
				stopSend.Store(true)
				stopSink.Store(true)
				wg.Wait()
			})
		}
	}
}
