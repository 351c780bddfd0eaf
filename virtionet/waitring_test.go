package virtionet

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/uring"
)

// eventfdIrq is an irqfd as the VMM's MSI vectors are: TriggerFd hands
// the worker the eventfd to write, Trigger writes it itself.
type eventfdIrq struct {
	fd                int
	triggers, fdCalls atomic.Int64
}

func newEventfdIrq(t *testing.T) *eventfdIrq {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &eventfdIrq{fd: fd}
}

func (e *eventfdIrq) Trigger() error {
	e.triggers.Add(1)
	_, err := unix.Write(e.fd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	return err
}

func (e *eventfdIrq) TriggerFd() (int, error) {
	e.fdCalls.Add(1)
	return e.fd, nil
}

// take reads and resets the eventfd's count: the interrupts written.
func (e *eventfdIrq) take() uint64 {
	var b [8]byte
	if n, err := unix.Read(e.fd, b[:]); err != nil || n != 8 {
		return 0
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

func waitRingTuning() Tuning {
	tun := DefaultTuning()
	tun.WaitRing = true
	return tun
}

// TestWaitRingPing: with WaitRing, a ping's turn (a lone frame in, its
// answer out) costs the worker one io_uring_enter per wakeup, two per
// turn, and the rx interrupt is the eventfd write the worker hands over
// in the enter it sleeps in, not a Trigger of its own.
func TestWaitRingPing(t *testing.T) {
	skipUnlessUring(t)
	for _, io := range rigIOs {
		t.Run(string(io), func(t *testing.T) {
			skipUnlessIO(t, io)
			r := newRig(t, rigOptions{io: io, tuning: waitRingTuning()})
			irq := newEventfdIrq(t)
			r.rx.AddRxBuffers(128, 2048)
			r.rx.EnableInterrupts()
			a := r.drv.Activation(r.feat, r.rx, r.tx)
			a.Interrupts[rxQueue] = irq
			if err := r.dev.Activate(a); err != nil {
				t.Fatal(err)
			}
			r.dev.mu.Lock()
			w := r.dev.workers[0]
			r.dev.mu.Unlock()
			turn := func(seq int) {
				r.rx.EnableInterrupts() // the driver takes each rx interrupt
				r.roundTrip(seq)
			}
			for seq := range 5 { // the worker's first runs
				turn(seq)
			}
			if strings.Contains(r.log.String(), "epoll_wait") {
				t.Skipf("no ring wait on this kernel: %s", r.log.String())
			}
			irq.take()
			calls0, irqs0 := w.ringCalls.Load(), r.stats(rxQueue).Interrupts
			const turns = 20
			for seq := range turns {
				turn(100 + seq)
			}
			// The worker is asleep (the last answer was read) or about to
			// be: its last enter may not be counted yet.
			calls := w.ringCalls.Load() - calls0
			if calls < turns || calls > 2*turns+1 {
				t.Errorf("%d io_uring_enter calls for %d turns, want one per wakeup (<= %d)\n%s", calls, turns, 2*turns+1, tail(r.trace.String()))
			}
			irqs := r.stats(rxQueue).Interrupts - irqs0
			if irqs == 0 {
				t.Fatal("no rx interrupts")
			}
			waitFor(t, "the rx interrupts written", func() bool { return irq.take() > 0 || irq.fdCalls.Load() == 0 })
			if n := irq.triggers.Load(); n != 0 {
				t.Errorf("the worker wrote the irqfd itself %d times, want every write in its enter", n)
			}
			if irq.fdCalls.Load() == 0 {
				t.Error("TriggerFd never called")
			}
		})
	}
}

// TestWaitRingFallback: where the kernel lacks what the ring wait needs,
// the worker says so once and waits in epoll_wait, and frames move.
func TestWaitRingFallback(t *testing.T) {
	newWaitRing = func(uint32) (*uring.Ring, error) { return nil, errors.New("io_uring_setup: operation not permitted") }
	t.Cleanup(func() { newWaitRing = uring.NewWaiter })
	r := newRig(t, rigOptions{io: IOWritev, tuning: waitRingTuning()})
	r.rx.AddRxBuffers(128, 2048)
	r.activate()
	for seq := range 3 {
		r.roundTrip(seq)
	}
	if n := strings.Count(r.log.String(), "waits in epoll_wait"); n != 1 {
		t.Fatalf("notices %q, want one of epoll_wait", r.log.String())
	}
}
