package virtionet

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// With WorkerBatch the worker thread runs under SCHED_BATCH, and without
// it under the normal policy.
func TestWorkerBatchPolicy(t *testing.T) {
	for _, batch := range []bool{false, true} {
		tun := DefaultTuning()
		tun.WorkerBatch = batch
		r := newRig(t, rigOptions{tuning: tun})
		r.activate()
		var tid int32
		waitFor(t, "the worker thread", func() bool { tid = r.dev.workerTid.Load(); return tid != 0 })
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
		if err != nil {
			t.Fatal(err)
		}
		// Fields after the command's closing parenthesis: state is field 3,
		// policy field 41.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		want := fmt.Sprint(unix.SCHED_NORMAL)
		if batch {
			want = fmt.Sprint(unix.SCHED_BATCH)
		}
		if got := f[41-3]; got != want {
			t.Errorf("WorkerBatch %v: worker policy %s, want %s", batch, got, want)
		}
		r.dev.Reset()
	}
}
