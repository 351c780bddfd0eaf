package virtionet

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadPolicy is a thread's scheduling policy, from /proc.
func threadPolicy(t *testing.T, tid int32) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: the state is field
	// 3, the policy field 41.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var p int
	fmt.Sscan(f[41-3], &p)
	return p
}

// workerThread waits for the rig's worker thread and returns its id.
func workerThread(t *testing.T, r *rig) int32 {
	t.Helper()
	var tid int32
	waitFor(t, "the worker thread", func() bool { tid = r.dev.pairs[0].workerTid.Load(); return tid != 0 })
	return tid
}

// With WorkerBatch the worker runs under SCHED_BATCH while tx is in a
// burst (a run of NotifyThreshold chains or more) and under the normal
// policy once a run is short; without it, always normal.
func TestWorkerBatchFollowsBursts(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("WorkerBatch=", batch), func(t *testing.T) {
			tun := DefaultTuning()
			tun.WorkerBatch, tun.NotifyThreshold = batch, 8
			r := newRig(t, rigOptions{tuning: tun})
			r.activate()
			tid := workerThread(t, r)
			if p := threadPolicy(t, tid); p != unix.SCHED_NORMAL {
				t.Fatalf("policy %d before any burst, want normal", p)
			}
			r.txBurst(16, 60)
			r.tx.Kick()
			r.drainPeer(16)
			r.waitUsed(r.tx, 16, nil)
			want := unix.SCHED_NORMAL
			if batch {
				want = unix.SCHED_BATCH
			}
			waitFor(t, "the policy of a burst", func() bool { return threadPolicy(t, tid) == want })
			// A lone frame once the burst is over: normal again.
			time.Sleep(5 * time.Millisecond)
			r.txBurst(1, 60)
			r.tx.ForceKick()
			r.drainPeer(1)
			waitFor(t, "the normal policy after a short run", func() bool { return threadPolicy(t, tid) == unix.SCHED_NORMAL })
		})
	}
}

// An rx burst leaves the worker under the normal policy even with
// WorkerBatch where it may share the vCPUs' CPUs (here: the vCPUs are
// unknown): the vCPU is waiting for those frames, and a batch thread
// would wait for the vCPU's time slice to end.
func TestWorkerBatchNotInRxBursts(t *testing.T) {
	tun := DefaultTuning()
	tun.WorkerBatch, tun.NotifyThreshold = true, 8
	r := newRig(t, rigOptions{tuning: tun})
	r.activate()
	tid := workerThread(t, r)
	r.rx.AddRxBuffers(64, 2048)
	r.rx.Kick()
	for i := 0; i < 32; i++ {
		r.peerWrite(r.txFrame(i, 60)[r.hdrLen():])
	}
	r.waitUsed(r.rx, 32, nil)
	if r.stats(rxQueue).Frames < 32 {
		t.Fatalf("rx moved %d frames, want 32", r.stats(rxQueue).Frames)
	}
	if p := threadPolicy(t, tid); p != unix.SCHED_NORMAL {
		t.Fatalf("policy %d after an rx burst, want normal (%d)", p, unix.SCHED_NORMAL)
	}
}

// Where the worker and the vCPU are pinned apart (the vCPU is a thread
// pinned to the last CPU, the worker is pinned off it, as an operator
// would), an rx burst runs it under SCHED_BATCH, and a lone rx frame makes
// it normal again.
func TestWorkerBatchInRxBurstsPinnedApart(t *testing.T) {
	r, tid := pinnedApartRig(t, uint64(FeatVersion1|FeatMAC|FeatMrgRxBuf))
	for i := 0; i < 32; i++ { // waiting for buffers: one run takes them all
		r.peerWrite(r.txFrame(i, 60))
	}
	r.rx.AddRxBuffers(64, 2048)
	r.rx.Kick()
	r.waitUsed(r.rx, 32, nil)
	waitFor(t, "SCHED_BATCH after an rx burst", func() bool { return threadPolicy(t, tid) == unix.SCHED_BATCH })
	r.peerWrite(r.txFrame(32, 60))
	r.waitUsed(r.rx, 1, nil)
	waitFor(t, "the normal policy after a lone rx frame", func() bool { return threadPolicy(t, tid) == unix.SCHED_NORMAL })
}

// pinnedApartRig is a rig (features acked; 0: all offered) whose worker
// and vCPU are pinned apart (the vCPU is a thread pinned to the last CPU,
// the worker is pinned off it, as an operator would), with WorkerBatch,
// NotifyThreshold 8 and no busy polling; and the worker's thread id.
func pinnedApartRig(t *testing.T, features uint64) (*rig, int32) {
	vcpu := pinnedThread(t)
	tun := DefaultTuning()
	tun.WorkerBatch, tun.NotifyThreshold, tun.PollUs = true, 8, 0
	r := newRig(t, rigOptions{tuning: tun, features: features,
		vcpus: func() []int { return []int{vcpu} }})
	r.activate()
	tid := workerThread(t, r)
	var rest, vs unix.CPUSet
	if unix.SchedGetaffinity(int(tid), &rest) != nil || unix.SchedGetaffinity(vcpu, &vs) != nil {
		t.Fatal("cannot read the affinities")
	}
	all := rest
	for i := range rest {
		rest[i] &^= vs[i]
	}
	if err := unix.SchedSetaffinity(int(tid), &rest); err != nil {
		t.Fatal(err)
	}
	// The thread goes back to Go's pool when the worker stops.
	t.Cleanup(func() { unix.SchedSetaffinity(int(tid), &all) })
	return r, tid
}

// With GUEST_TSO a TCP stream comes as a few frames of up to 64 KiB per
// rx run: a run that moved as many bytes as NotifyThreshold frames of the
// MTU is a burst however few its frames; a small lone frame is not.
func TestWorkerBatchRxBurstByBytes(t *testing.T) {
	r, tid := pinnedApartRig(t, 0)
	if r.feat&FeatGuestTSO4 == 0 {
		t.Fatal("the rig does not ack GUEST_TSO4")
	}
	r.rx.AddRxBuffers(64, 2048)
	r.rx.Kick()
	r.peerWrite(r.txFrame(0, 8*1500+100)) // 6 buffers
	r.waitUsed(r.rx, 6, nil)
	waitFor(t, "SCHED_BATCH after one large rx frame", func() bool { return threadPolicy(t, tid) == unix.SCHED_BATCH })
	r.peerWrite(r.txFrame(1, 1400))
	r.waitUsed(r.rx, 1, nil)
	waitFor(t, "the normal policy after a lone MTU-sized rx frame", func() bool { return threadPolicy(t, tid) == unix.SCHED_NORMAL })
}

// Where the worker has a CPU no vCPU may use but may also run on the
// vCPU's (unpinned, more CPUs than vCPUs), an rx burst leaves it normal:
// landed beside the vCPU, a batch worker would wait out its time slice.
func TestWorkerBatchNotInRxBurstsBesideAVCPU(t *testing.T) {
	vcpu := pinnedThread(t)
	tun := DefaultTuning()
	tun.WorkerBatch, tun.NotifyThreshold, tun.PollUs = true, 8, 0
	r := newRig(t, rigOptions{tuning: tun, features: uint64(FeatVersion1 | FeatMAC | FeatMrgRxBuf),
		vcpus: func() []int { return []int{vcpu} }})
	r.rx.AddRxBuffers(64, 2048)
	for i := 0; i < 32; i++ { // waiting before DRIVER_OK: one run takes them all
		r.peerWrite(r.txFrame(i, 60))
	}
	r.activate()
	tid := workerThread(t, r)
	r.waitUsed(r.rx, 32, nil)
	if r.stats(rxQueue).Frames < 32 {
		t.Fatalf("rx moved %d frames, want 32", r.stats(rxQueue).Frames)
	}
	if p := threadPolicy(t, tid); p != unix.SCHED_NORMAL {
		t.Fatalf("policy %d after an rx burst beside a vCPU's CPU, want normal (%d)", p, unix.SCHED_NORMAL)
	}
}

// With WorkerBatchBytes a tx run of that many bytes counts as a burst
// however few its frames: a bulk sender's lone frame (a 1 KiB write that
// TCP sent alone) leaves the worker under SCHED_BATCH, so the sender's
// next kick does not preempt it; a lone small frame (a request, an ACK)
// makes the worker normal again.
func TestWorkerBatchBytesLoneBulkFrame(t *testing.T) {
	tun := DefaultTuning()
	tun.WorkerBatch, tun.NotifyThreshold, tun.PollUs, tun.WorkerBatchBytes = true, 8, 0, 1024
	r := newRig(t, rigOptions{tuning: tun})
	r.activate()
	tid := workerThread(t, r)
	r.txBurst(1, 1100)
	r.tx.ForceKick()
	r.drainPeer(1)
	r.waitUsed(r.tx, 1, nil)
	waitFor(t, "SCHED_BATCH after a lone 1100-byte frame", func() bool { return threadPolicy(t, tid) == unix.SCHED_BATCH })
	r.txBurst(1, 60)
	r.tx.ForceKick()
	r.drainPeer(1)
	r.waitUsed(r.tx, 1, nil)
	waitFor(t, "the normal policy after a lone small frame", func() bool { return threadPolicy(t, tid) == unix.SCHED_NORMAL })
}
