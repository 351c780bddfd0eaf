package virtionet

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// In tx poll mode a burst leaves the guest's kicks off: chains it adds
// while the worker polls go out without a kick, and once a look finds the
// ring idle, kicks are back on for the next chain. With and without
// EVENT_IDX (avail_event left behind, or the NO_NOTIFY flag).
func testTxPollModeKeepsKicksOff(t *testing.T, io IOMode) {
	for _, eventIdx := range []bool{true, false} {
		t.Run(fmt.Sprint("event_idx=", eventIdx), func(t *testing.T) {
			tun := DefaultTuning()
			tun.NotifyThreshold, tun.PollUs = 8, 200_000 // long: on a loaded machine a round must not let the ring look idle
			feat := uint64(0)
			if !eventIdx {
				feat = allBut(FeatEventIdx)
			}
			r := newRig(t, rigOptions{io: io, tuning: tun, features: feat})
			// Posted before DRIVER_OK, the whole first burst is in the
			// worker's first run (one posted after could be split
			// between that look and the kick, below the threshold).
			r.txBurst(8, 60)
			if !r.tx.Kick() {
				t.Fatal("the first burst was not kicked")
			}
			r.activate()
			r.drainPeer(8)
			r.waitUsed(r.tx, 8, nil)
			// The worker polls now: more chains need no kick.
			for round := 0; round < 3; round++ {
				r.txBurst(8, 60)
				if r.tx.Kick() {
					t.Fatalf("round %d: the driver was asked to kick while the device polls", round)
				}
				r.drainPeer(8)
				r.waitUsed(r.tx, 8, nil)
			}
			// Idle: one look finds nothing and turns kicks back on.
			waitFor(t, "kicks back on", func() bool { return txKicksOn(r, eventIdx) })
			r.txBurst(1, 60)
			if !r.tx.Kick() {
				t.Fatal("after the ring went idle the next chain was not kicked")
			}
			r.drainPeer(1)
			if k := r.stats(txQueue).Kicks; k != 2 {
				t.Errorf("device saw %d kicks for 33 chains, want 2", k)
			}
		})
	}
}

// A lone chain does not start busy polling: the next chain after it is
// kicked at once (on a shared CPU a yielding worker would see it only at
// its next turn).
func testLoneFrameKeepsKicks(t *testing.T, io IOMode) {
	tun := DefaultTuning()
	tun.NotifyThreshold, tun.PollUs = 8, 2_000_000
	r := newRig(t, rigOptions{io: io, tuning: tun})
	// Chain 0 goes in before DRIVER_OK, unkicked, for the worker's first
	// run: posted after, it could meet that run, which would take it
	// and rightly move avail_event past it. Once it is used and kicks
	// are on, the worker is asleep for the next chain.
	r.txBurst(1, 60)
	r.activate()
	for i := 0; i < 4; i++ {
		if i > 0 {
			r.txBurst(1, 60)
			if !r.tx.Kick() {
				t.Fatalf("chain %d: not kicked; a lone frame must not start busy polling", i)
			}
		}
		r.drainPeer(1)
		r.waitUsed(r.tx, 1, nil)
		// Well before PollUs is over: a poll would keep them off 2 s.
		deadline := time.Now().Add(300 * time.Millisecond)
		for r.tx.AvailEvent() != r.tx.AvailIdx() {
			if time.Now().After(deadline) {
				t.Fatalf("chain %d: kicks still off 300 ms after it was used", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// A lone frame in, where the worker has a CPU no vCPU may use (PollLone):
// the worker polls after it with tx kicks off, so the guest's answer goes
// out without a kick, with and without EVENT_IDX; once the poll is over,
// kicks are back on. The vCPU is a thread pinned to the last CPU.
func testLoneRxPollTakesTheReplyWithoutAKick(t *testing.T, io IOMode) {
	vcpu := pinnedThread(t)
	for _, eventIdx := range []bool{true, false} {
		t.Run(fmt.Sprint("event_idx=", eventIdx), func(t *testing.T) {
			tun := DefaultTuning()
			tun.PollUs, tun.PollLone = 300_000, true // long: the reply comes while it polls
			feat := uint64(0)
			if !eventIdx {
				feat = allBut(FeatEventIdx)
			}
			r := newRig(t, rigOptions{io: io, tuning: tun, features: feat, vcpus: func() []int { return []int{vcpu} }})
			r.rx.AddRxBuffers(8, 2048)
			r.activate()
			r.rx.Kick()
			r.peerWrite(r.txFrame(0, 64))
			r.waitUsed(r.rx, 1, nil)
			r.txBurst(1, 60) // the answer
			if r.tx.Kick() {
				t.Fatal("the driver was asked to kick for the answer while the device polls")
			}
			r.drainPeer(1)
			r.waitUsed(r.tx, 1, nil)
			waitFor(t, "kicks back on", func() bool { return txKicksOn(r, eventIdx) })
			r.txBurst(1, 60)
			if !r.tx.Kick() {
				t.Fatal("after the poll the next chain was not kicked")
			}
			r.drainPeer(1)
		})
	}
}

// txKicksOn reports whether the device asks the driver to kick for its
// next tx chain: avail_event at the driver's index (EVENT_IDX), or
// NO_NOTIFY clear.
func txKicksOn(r *rig, eventIdx bool) bool {
	if eventIdx {
		return r.tx.AvailEvent() == r.tx.AvailIdx()
	}
	return r.tx.UsedFlags()&1 == 0
}

// pinnedThread is the id of a thread, alive until the test ends, that may
// run only on the last CPU, as a pinned vCPU's; the test is skipped with
// one CPU (there a worker has no CPU of its own).
func pinnedThread(t *testing.T) int {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		t.Skip("needs 2 CPUs")
	}
	last := -1
	for c := 0; c < len(all)*64; c++ {
		if all.IsSet(c) {
			last = c
		}
	}
	tid, done := make(chan int), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var one unix.CPUSet
		one.Set(last)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			tid <- -1
			return
		}
		tid <- unix.Gettid()
		<-done
	}()
	id := <-tid
	if id < 0 {
		t.Skip("cannot pin a thread")
	}
	t.Cleanup(func() { close(done) })
	return id
}

// Lone frames poll only while their answers come within the poll: a guest
// that answers after the poll is over (as one that halts between
// interrupts does in a nested L1) soon gets no poll after a frame to it,
// its answer a kick again, and no CPU spun for nothing; once answers come
// quickly, the polls come back. Each direction has its own answer time:
// here the host side answers the guest's frames at once.
func TestLonePollFollowsAnswerTime(t *testing.T) {
	vcpu := pinnedThread(t)
	tun := DefaultTuning()
	tun.PollUs, tun.PollLone = 100_000, true // long: a loaded machine's delays stay within it
	poll := time.Duration(tun.PollUs) * time.Microsecond
	r := newRig(t, rigOptions{tuning: tun, vcpus: func() []int { return []int{vcpu} }})
	r.rx.AddRxBuffers(64, 2048)
	r.activate()
	r.rx.Kick()
	seq := 0
	// exchange sends a frame in after before, and answers it after wait;
	// it reports whether the driver was asked to kick for the answer.
	exchange := func(before, wait time.Duration) bool {
		t.Helper()
		time.Sleep(before)
		r.peerWrite(r.txFrame(seq, 64))
		seq++
		r.waitUsed(r.rx, 1, nil)
		time.Sleep(wait)
		r.txBurst(1, 60)
		kicked := r.tx.Kick()
		r.drainPeer(1)
		r.waitUsed(r.tx, 1, nil)
		r.rx.AddRxBuffers(1, 2048)
		r.rx.Kick()
		return kicked
	}
	if exchange(0, 0) {
		t.Fatal("the first answer, within the poll, was kicked")
	}
	for i := 0; i < 6; i++ {
		exchange(0, 3*poll)
	}
	// The poll after the guest's last answer is over too (before): a
	// lone frame in now must not start one.
	if !exchange(2*poll, 0) {
		t.Fatal("after answers that came long after the poll, a lone frame still polls")
	}
	for i := 0; ; i++ {
		if !exchange(0, 0) {
			break
		}
		if i == 20 {
			t.Fatal("quick answers did not bring the lone poll back in 20 exchanges")
		}
	}
}
