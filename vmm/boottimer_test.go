package vmm

import (
	"math"
	"testing"
	"time"
)

// The set-up steps, the vCPU threads' start included, add up to the time
// from the process start to the first KVM_RUN.
func TestBootStepsAddUpToFirstRun(t *testing.T) {
	var b bootClock
	b.step("open")
	time.Sleep(2 * time.Millisecond)
	b.step("create VM")
	time.Sleep(3 * time.Millisecond)
	b.noteRun()
	s := b.stats(time.Now(), time.Now())
	var sum float64
	for _, st := range s.SetupMs {
		sum += st.Ms
	}
	want := millis(time.Unix(0, s.FirstRunUnixNs).Sub(processStart))
	if len(s.SetupMs) != 3 || s.SetupMs[2].Step != "vCPU threads to first KVM_RUN" || s.SetupMs[2].Ms < 3 || math.Abs(sum-want) > 0.01 {
		t.Errorf("steps %+v add up to %.3f ms, first KVM_RUN after %.3f ms", s.SetupMs, sum, want)
	}
}
