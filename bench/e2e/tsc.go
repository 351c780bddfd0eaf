package e2e

import (
	"sync"
	"time"
)

func rdtsc() uint64

var (
	tscOnce sync.Once
	tscKHz  uint64
)

// HostTSCkHz measures the TSC rate against the host clock once (200 ms).
// The bench guest gets it as tsc_khz=: a KVM guest's TSC runs at the host's
// rate, and QEMU's TCG reads the host's TSC.
func HostTSCkHz() uint64 {
	tscOnce.Do(func() {
		t0, c0 := time.Now(), rdtsc()
		time.Sleep(200 * time.Millisecond)
		t1, c1 := time.Now(), rdtsc()
		tscKHz = (c1 - c0) * 1000 / uint64(t1.Sub(t0).Microseconds())
	})
	return tscKHz
}
