package device

import (
	"fmt"
	"testing"
	"time"

	"tinyvmm/virtionet"
)

// BenchmarkTxCPU is the device's own CPU per tx frame, the figure that
// BenchmarkTx's worker-ns/frame blurs: there the worker busy-polls while
// the Go driver refills the ring, and the poll's CPU counts as well. Here
// the driver fills the ring, kicks, and waits until the device has used
// every chain before it fills it again; busy polling is off, so the
// worker sleeps in between and its CPU (a thread's CPU time, which a
// loaded machine blurs far less than a rate) is the frames' work: the
// descriptor walk, the send and the tap's own path into the host stack,
// plus one wakeup per ring.
func BenchmarkTxCPU(b *testing.B) {
	skipUnlessNetns(b)
	for _, io := range []virtionet.IOMode{virtionet.IOUring, virtionet.IOWritev} {
		for _, size := range []int{64, 1514} {
			b.Run(fmt.Sprintf("io=%s/frame=%d", io, size), func(b *testing.B) {
				tun := virtionet.DefaultTuning()
				tun.PollUs = 0
				env, frame := txEnv(b, false, io, tun, rxFeatures|virtionet.FeatMrgRxBuf, size)
				stats := func() (frames, cpu uint64) {
					s := env.Dev.Stats()
					return s.Queues[1].Frames, s.WorkerCPUNs
				}
				// One ring: fill, kick, wait until the device counted it.
				ring := func() int {
					f0, _ := stats()
					n := 0
					for env.Guest.Queue(frame) {
						n++
					}
					env.Guest.Kick()
					for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
						if f, _ := stats(); f-f0 >= uint64(n) {
							return n
						}
						time.Sleep(20 * time.Microsecond)
					}
					b.Fatalf("the device took fewer than %d frames in 5 s", n)
					return 0
				}
				for range 20 { // ARP, the worker's first runs
					ring()
				}
				f0, c0 := stats()
				b.ResetTimer()
				for done := 0; done < b.N; {
					done += ring()
				}
				b.StopTimer()
				f1, c1 := stats()
				b.ReportMetric(float64(c1-c0)/float64(f1-f0), "worker-ns/frame")
			})
		}
	}
}
