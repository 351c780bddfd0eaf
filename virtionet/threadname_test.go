package virtionet

import (
	"testing"

	"tinyvmm/internal/threadname"
)

// The worker's thread carries the device's name while it serves the
// queues (top -H, perf), and gives it back when the worker stops: Go
// hands the thread to other goroutines then.
func TestWorkerThreadIsNamedAfterTheDevice(t *testing.T) {
	r := newRig(t, rigOptions{tuning: DefaultTuning()})
	r.activate()
	tid := workerThread(t, r)
	if got := threadname.Of(int(tid)); got != "net-test0" {
		t.Errorf("worker thread %d is called %q, want net-test0", tid, got)
	}
	r.dev.Close()
	if got := threadname.Of(int(tid)); got == "net-test0" {
		t.Errorf("worker thread %d kept the name net-test0 after the device closed", tid)
	}
}

// With several pairs each worker's thread name says which pair it serves.
func TestPairWorkersAreNamedByPair(t *testing.T) {
	d := mqTestDevice(t, IOWritev)
	for i, want := range []string{"net-mq0-q0", "net-mq0-q1"} {
		if got := d.pairs[i].name; got != want {
			t.Errorf("pair %d's worker is named %q, want %q", i, got, want)
		}
	}
}
