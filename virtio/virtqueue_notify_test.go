package virtio_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
	"tinyvmm/virtio/virtiotest"
)

func TestNeedEvent(t *testing.T) {
	cases := []struct {
		event, now, old uint16
		want            bool
	}{
		{0, 1, 0, true},
		{0, 0, 0, false},          // nothing moved
		{5, 5, 0, false},          // event not yet passed: now must exceed it
		{4, 5, 0, true},           // last one published
		{9, 5, 0, false},          // too far ahead
		{3, 5, 4, false},          // already passed before old
		{0xffff, 2, 0xfffe, true}, // across the wrap
		{1, 2, 0xfffe, true},
		{2, 2, 0xfffe, false},
	}
	for _, c := range cases {
		if got := virtio.NeedEvent(c.event, c.now, c.old); got != c.want {
			t.Errorf("NeedEvent(%d, %d, %d) = %v, want %v", c.event, c.now, c.old, got, c.want)
		}
	}
}

// serve pops, returns and publishes every waiting chain, and says whether
// the device would interrupt.
func serve(t *testing.T, q *virtio.Queue) (n int, irq bool) {
	t.Helper()
	for {
		c, ok, err := q.Pop()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		q.AddUsed(c.Head, 0)
		n++
	}
	q.PublishUsed()
	return n, q.NeedsInterrupt()
}

// TestEventIdxKicks: the device's avail_event decides which driver kicks
// are sent; while the device polls (no EnableNotify) there are none.
func TestEventIdxKicks(t *testing.T) {
	_, r, q := newRing(t, 16, virtiotest.RingOptions{EventIdx: true})
	q.EnableNotify() // avail_event = 0: kick on the first chain
	r.AddChain(nil, []uint32{1})
	r.AddChain(nil, []uint32{1})
	if !r.Kick() {
		t.Fatal("no kick for the first chains after EnableNotify")
	}
	serve(t, q) // device is polling: it has not re-enabled notifications
	r.AddChain(nil, []uint32{1})
	if r.Kick() {
		t.Fatal("kicked although avail_event lies behind")
	}
	if more := q.EnableNotify(); !more {
		t.Fatal("EnableNotify missed the chain added meanwhile")
	}
	serve(t, q)
	if q.EnableNotify() {
		t.Fatal("EnableNotify reported more with an empty ring")
	}
	r.Used()
	r.AddChain(nil, []uint32{1})
	if !r.Kick() {
		t.Fatal("no kick after EnableNotify on an empty ring")
	}
	if r.Kicks != 2 || r.Suppressed != 1 {
		t.Fatalf("kicks %d suppressed %d, want 2 and 1", r.Kicks, r.Suppressed)
	}
}

// TestAvailEventAhead: with the notification threshold the driver kicks
// only once it has added AvailEventAhead+1 chains.
func TestAvailEventAhead(t *testing.T) {
	_, r, q := newRing(t, 16, virtiotest.RingOptions{EventIdx: true})
	q.AvailEventAhead = 3
	q.EnableNotify()
	if got := r.AvailEvent(); got != 3 {
		t.Fatalf("avail_event = %d, want 3", got)
	}
	kicks := 0
	for i := 0; i < 4; i++ {
		r.AddChain(nil, []uint32{1})
		if r.Kick() {
			kicks++
			if i != 3 {
				t.Fatalf("kicked after chain %d, want only after the 4th", i+1)
			}
		}
	}
	if kicks != 1 {
		t.Fatalf("%d kicks, want 1", kicks)
	}
}

// TestEventIdxInterrupts: used_event decides which publishes interrupt.
func TestEventIdxInterrupts(t *testing.T) {
	_, r, q := newRing(t, 16, virtiotest.RingOptions{EventIdx: true})
	r.EnableInterrupts() // used_event = 0
	r.AddChain(nil, []uint32{1})
	if _, irq := serve(t, q); !irq {
		t.Fatal("no interrupt for the first used element")
	}
	r.DisableInterrupts()
	r.AddChain(nil, []uint32{1})
	if _, irq := serve(t, q); irq {
		t.Fatal("interrupt although the driver disabled them")
	}
	r.Used()
	r.SetUsedEvent(r.UsedIdx() + 2) // interrupt when the 3rd next is used
	irqs := 0
	for i := 0; i < 4; i++ {
		r.AddChain(nil, []uint32{1})
		if _, irq := serve(t, q); irq {
			irqs++
			if i != 2 {
				t.Fatalf("interrupt after element %d, want after the 3rd", i+1)
			}
		}
	}
	if irqs != 1 {
		t.Fatalf("%d interrupts, want 1", irqs)
	}
	if q.NeedsInterrupt() {
		t.Fatal("interrupt with nothing new published")
	}
}

// TestFlagsWithoutEventIdx: NO_NOTIFY and NO_INTERRUPT do the job.
func TestFlagsWithoutEventIdx(t *testing.T) {
	_, r, q := newRing(t, 16, virtiotest.RingOptions{})
	r.AddChain(nil, []uint32{1})
	if !r.Kick() {
		t.Fatal("no kick with notifications enabled")
	}
	q.DisableNotify()
	if r.UsedFlags()&virtio.UsedFNoNotify == 0 {
		t.Fatal("DisableNotify did not set NO_NOTIFY")
	}
	r.AddChain(nil, []uint32{1})
	if r.Kick() {
		t.Fatal("kicked despite NO_NOTIFY")
	}
	if !q.EnableNotify() {
		t.Fatal("EnableNotify missed waiting chains")
	}
	if r.UsedFlags()&virtio.UsedFNoNotify != 0 {
		t.Fatal("EnableNotify left NO_NOTIFY set")
	}
	if _, irq := serve(t, q); !irq {
		t.Fatal("no interrupt with interrupts enabled")
	}
	r.DisableInterrupts()
	r.AddChain(nil, []uint32{1})
	if _, irq := serve(t, q); irq {
		t.Fatal("interrupt despite NO_INTERRUPT")
	}
	r.EnableInterrupts()
	r.AddChain(nil, []uint32{1})
	if _, irq := serve(t, q); !irq {
		t.Fatal("no interrupt after EnableInterrupts")
	}
}

// TestConcurrentDriverAndDevice runs the driver and a device on two
// goroutines with eventfd kicks and EVENT_IDX on both sides, the way the
// VMM runs them; under -race it checks the ring accesses are synchronized,
// and the counts check no chain is lost or duplicated.
func TestConcurrentDriverAndDevice(t *testing.T) {
	for _, eventIdx := range []bool{false, true} {
		_, r, q := newRing(t, 64, virtiotest.RingOptions{EventIdx: eventIdx, BufSize: 64})
		const total = 20000
		done := make(chan error, 1)
		go func() { done <- device(q, r.KickFD, r.Irq, total) }()
		sent, got := 0, 0
		frame := [][]byte{make([]byte, 60)}
		r.EnableInterrupts()
		deadline := time.Now().Add(20 * time.Second)
		for got < total && time.Now().Before(deadline) {
			for sent < total {
				if _, err := r.AddChain(frame, nil); err != nil {
					break
				}
				sent++
			}
			r.Kick()
			n := len(r.Used())
			got += n
			if n == 0 && !r.EnableInterrupts() {
				r.Irq.Wait(100 * time.Millisecond)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got != total || r.DeviceErr != nil {
			t.Fatalf("event idx %v: %d of %d chains came back (%v)", eventIdx, got, total, r.DeviceErr)
		}
		t.Logf("event idx %v: %d chains, %d kicks (%d suppressed), %d interrupts",
			eventIdx, total, r.Kicks, r.Suppressed, r.Irq.Count())
	}
}

// device is a minimal worker: wait for a kick, drain with notifications
// off, re-enable and re-check, interrupt when the driver asks.
func device(q *virtio.Queue, kick int, irq virtio.Interrupt, total int) error {
	var buf [8]byte
	done := 0
	for done < total {
		q.DisableNotify()
		for {
			c, ok, err := q.Pop()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			q.AddUsed(c.Head, 0)
			done++
		}
		q.PublishUsed()
		if q.NeedsInterrupt() {
			irq.Trigger()
		}
		if q.EnableNotify() || done >= total {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(kick), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			return err
		}
		unix.Read(kick, buf[:])
	}
	return nil
}

// TestEnableNotifyAfterRewind: chains given back by Rewind are already on
// the ring, so avail_event must follow the index the device last read, or
// a driver that is past it never kicks again.
func TestEnableNotifyAfterRewind(t *testing.T) {
	_, r, q := newRing(t, 16, virtiotest.RingOptions{EventIdx: true})
	for i := 0; i < 3; i++ {
		r.AddChain(nil, []uint32{1})
	}
	for i := 0; i < 3; i++ {
		if _, ok, err := q.Pop(); !ok || err != nil {
			t.Fatalf("pop %d: ok=%v err=%v", i, ok, err)
		}
	}
	q.Rewind(2) // rx pre-parsed three buffers but filled one
	c, ok, err := q.Pop()
	if !ok || err != nil {
		t.Fatalf("pop after rewind: ok=%v err=%v", ok, err)
	}
	q.AddUsed(c.Head, 0)
	q.PublishUsed()
	q.EnableNotify() // two rewound chains still wait: the device wants more
	r.Kick()         // clear the kick state of the first three
	r.AddChain(nil, []uint32{1})
	if !r.Kick() {
		t.Fatal("no kick for a new chain after EnableNotify following a Rewind")
	}
}
