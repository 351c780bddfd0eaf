// Package tour tells the story of one packet through tinyvmm, from the real
// --trace of a run: `tinyvmm tour` boots the default guest with a NIC in a
// network namespace of its own, has it ping the host once, and explains
// each step of the echo request and of its reply with the file and function
// where it happens, the counter it moves and the time it took.
//
// This file turns a trace into that story and needs no KVM, so it is
// tested on any machine; run.go makes the run.
package tour

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"tinyvmm/internal/textwrap"
	"tinyvmm/virtionet"
)

// Event is one line of the datapath trace (virtionet/trace.go):
// "+12.345678 tx pop head=3 bufs=2".
type Event struct {
	At    time.Duration // since the device's tracer started
	Queue string        // "tx" or "rx"
	What  string        // "kick", "pop", "batch", "used published", "irq", ...
	Args  string        // what follows, e.g. "head=3 bufs=2"
}

// ParseTrace returns the datapath events of a trace, in order; other lines
// (tinyvmm's notices) are skipped.
func ParseTrace(r io.Reader) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if ev, ok := parseEvent(strings.TrimRight(sc.Text(), "\r")); ok {
			evs = append(evs, ev)
		}
	}
	return evs, sc.Err()
}

// parseEvent reads "+SEC.USEC6 tx|rx WHAT[ ARGS]", WHAT being "used
// published" or one lower-case word. It is plain string code, not a regexp:
// a package-level regexp is compiled in every tinyvmm process as it starts,
// `run` included, and regexp's own init runs too when anything links it.
func parseEvent(line string) (Event, bool) {
	rest, ok := strings.CutPrefix(line, "+")
	if !ok {
		return Event{}, false
	}
	secs, rest, ok := strings.Cut(rest, ".")
	if !ok || !digits(secs) || len(rest) < 7 || !digits(rest[:6]) || rest[6] != ' ' {
		return Event{}, false
	}
	usecs, rest := rest[:6], rest[7:]
	queue, rest, ok := strings.Cut(rest, " ")
	if !ok || (queue != "tx" && queue != "rx") {
		return Event{}, false
	}
	var what, args string
	if rest == "used published" || strings.HasPrefix(rest, "used published ") {
		what, args = "used published", strings.TrimPrefix(rest[len("used published"):], " ")
	} else {
		n := 0
		for n < len(rest) && rest[n] >= 'a' && rest[n] <= 'z' {
			n++
		}
		if n == 0 || (n < len(rest) && rest[n] != ' ') {
			return Event{}, false
		}
		what, args = rest[:n], strings.TrimPrefix(rest[n:], " ")
	}
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return Event{}, false
	}
	us, _ := strconv.ParseInt(usecs, 10, 64)
	return Event{At: time.Duration(sec)*time.Second + time.Duration(us)*time.Microsecond, Queue: queue, What: what, Args: args}, true
}

// digits is whether s is one or more ASCII digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Step is one step of the story.
type Step struct {
	Text  string // what happens
	Where string // file and function
	Count string // the counter this step moves, "" if none
	// Took is the time since the previous traced step; Traced is false for
	// steps the trace cannot see (the guest's driver, KVM's ioeventfd).
	Took   time.Duration
	Traced bool
}

// Story is the echo request's way out and the reply's way in.
type Story struct {
	Out, In []Step
	// RoundTrip is from the request's kick to the reply's interrupt, as
	// the device saw it.
	RoundTrip time.Duration
	// Notes say what the trace showed beyond the one packet.
	Notes []string
}

// find returns the index of the first event at or after from on queue q
// whose What is what, or -1.
func find(evs []Event, from int, q, what string) int {
	for i := max(from, 0); i < len(evs); i++ {
		if evs[i].Queue == q && evs[i].What == what {
			return i
		}
	}
	return -1
}

// Tell builds the story of the first frame the guest sent and the first
// frame it received after it. stats are the device's counters at the end.
func Tell(evs []Event, stats virtionet.Stats) (Story, error) {
	var s Story
	pop := find(evs, 0, "tx", "pop")
	if pop < 0 {
		return s, fmt.Errorf("the trace has no tx chain: the guest sent nothing")
	}
	kick := -1
	for i := pop - 1; i >= 0; i-- {
		if evs[i].Queue == "tx" && evs[i].What == "kick" {
			kick = i
			break
		}
	}
	txPub := find(evs, pop, "tx", "used published")
	batch := find(evs, pop, "rx", "batch")
	if txPub < 0 || batch < 0 {
		return s, fmt.Errorf("the trace lacks the request's completion or the reply (%d events)", len(evs))
	}
	rxPub := find(evs, batch, "rx", "used published")
	if rxPub < 0 {
		return s, fmt.Errorf("the trace lacks the reply's used-index publish")
	}
	tx, rx := queueStats(stats, "tx"), queueStats(stats, "rx")

	last := evs[pop].At
	if kick >= 0 {
		last = evs[kick].At
	}
	since := func(i int) time.Duration {
		d := evs[i].At - last
		last = evs[i].At
		return d
	}
	start := last

	s.Out = append(s.Out,
		Step{Text: "the guest's virtio-net driver puts the frame in a chain (a 12-byte virtio_net_hdr and the frame), adds it to the tx avail ring and writes the queue's notify address",
			Where: "guest Linux, drivers/net/virtio_net.c start_xmit"},
		Step{Text: "KVM matches the write to an ioeventfd and signals its eventfd: no exit to tinyvmm",
			Where: "registered by virtio/pci/transport.go Transport.addIoeventfdsLocked"})
	if kick >= 0 {
		s.Out = append(s.Out, Step{Text: "the device's worker wakes in epoll and reads the kick",
			Where: "virtionet/worker.go worker.onKick", Count: fmt.Sprintf("tx kicks %d", tx.Kicks), Traced: true})
	} else {
		s.Notes = append(s.Notes, "no tx kick before the chain: the worker was already polling the ring (avail_event)")
	}
	s.Out = append(s.Out, Step{Text: "it pops the chain (" + evs[pop].Args + ") from the avail ring",
		Where: "virtionet/tx.go worker.txGroup, virtio/virtqueue.go Queue.Pop", Took: since(pop), Traced: true})
	if w := txWrite(evs, pop, txPub); w >= 0 {
		how := map[string]string{
			"writev":   "one writev per frame",
			"uring":    "one io_uring submission for the group",
			"sendmmsg": "one sendmmsg for the group",
		}[evs[w].What]
		if how == "" {
			how = evs[w].What
		}
		// The trace line comes just before the system call, so the call's
		// own time falls in the next step.
		s.Out = append(s.Out, Step{Text: "it stages the frame in a group for the tap (" + evs[w].Args + " frame(s)): " + how,
			Where: "virtionet/tx.go worker.txGroup, worker.flushTx", Took: since(w), Traced: true})
		call := map[string]string{"uring": "io_uring submission"}[evs[w].What]
		if call == "" {
			call = evs[w].What
		}
		s.Out = append(s.Out, Step{Text: "the " + call + " returns: the tap took the frame (the host's stack may handle it, and answer, within that call); the worker adds the used entry and publishes used.idx",
			Where: "virtionet/frameio.go frameIO, virtio/virtqueue.go Queue.AddUsed, virtionet/worker.go worker.publish",
			Count: fmt.Sprintf("tx frames %d, bytes %d", tx.Frames, tx.Bytes), Took: since(txPub), Traced: true})
	} else {
		s.Out = append(s.Out, Step{Text: "it writes the frame to the tap, adds the used entry and publishes used.idx",
			Where: "virtionet/tx.go worker.flushTx, virtionet/worker.go worker.publish",
			Count: fmt.Sprintf("tx frames %d, bytes %d", tx.Frames, tx.Bytes), Took: since(txPub), Traced: true})
	}
	if irq := find(evs, txPub, "tx", "irq"); irq >= 0 && irq < batch {
		s.Out = append(s.Out, Step{Text: "the guest asked for an interrupt (EVENT_IDX): the worker writes the tx vector's irqfd",
			Where: "virtionet/worker.go worker.publish, virtio/virtqueue.go Queue.NeedsInterrupt",
			Count: fmt.Sprintf("tx interrupts %d", tx.Interrupts), Took: since(irq), Traced: true})
	} else {
		s.Out = append(s.Out, Step{Text: "no tx interrupt: the guest's used_event did not ask for one (EVENT_IDX), it reclaims the buffer later",
			Where: "virtio/virtqueue.go Queue.NeedsInterrupt"})
	}

	s.In = append(s.In,
		Step{Text: "the host's kernel answers the echo request; the reply makes the tap readable and epoll wakes the worker, which reads it straight into the guest's rx buffers",
			Where: "virtionet/rx.go worker.handleRx, worker.rxBatch", Count: fmt.Sprintf("rx frames %d, bytes %d", rx.Frames, rx.Bytes),
			Took: since(batch), Traced: true},
		Step{Text: "the batch of " + evs[batch].Args + " frame(s) ends: one used.idx publish for the whole batch",
			Where: "virtionet/rx.go worker.rxBatch, virtionet/worker.go worker.publish", Took: since(rxPub), Traced: true})
	end := evs[rxPub].At
	if irq := find(evs, rxPub, "rx", "irq"); irq >= 0 {
		s.In = append(s.In, Step{Text: "one interrupt for the batch: the worker writes the rx vector's irqfd and KVM injects the MSI",
			Where: "virtionet/worker.go worker.publish, vmm/interrupts.go msiVector",
			Count: fmt.Sprintf("rx interrupts %d", rx.Interrupts), Took: since(irq), Traced: true})
		end = evs[irq].At
	} else {
		s.Notes = append(s.Notes, "no rx interrupt after the reply: the guest was polling (NAPI) and had not asked for one")
	}
	s.In = append(s.In, Step{Text: "the guest's NAPI poll takes the used entry and hands the frame to its stack: ping prints the reply",
		Where: "guest Linux, drivers/net/virtio_net.c virtnet_poll"})
	s.RoundTrip = end - start
	if tx.Frames != 1 || rx.Frames != 1 {
		s.Notes = append(s.Notes, fmt.Sprintf("the device moved %d tx and %d rx frames in the run; the story follows the first of each", tx.Frames, rx.Frames))
	}
	return s, nil
}

func queueStats(s virtionet.Stats, name string) virtionet.QueueStats {
	for _, q := range s.Queues {
		if q.Queue == name {
			return q
		}
	}
	return virtionet.QueueStats{Queue: name}
}

// Width is the terminal width the story is laid out for.
const Width = 80

// Render writes the story, wrapped to Width columns.
func Render(w io.Writer, s Story) {
	n := 0
	part := func(title string, steps []Step) {
		fmt.Fprintf(w, "\n%s\n", title)
		for _, st := range steps {
			n++
			took := "   (untraced)"
			if st.Traced {
				took = fmt.Sprintf("%10s", "+"+micros(st.Took))
			}
			lines := wrap(st.Text, Width-len(took)-5)
			for i, l := range lines {
				switch {
				case i == 0:
					fmt.Fprintf(w, "%2d. %-*s%s\n", n, Width-len(took)-5, l, took)
				default:
					fmt.Fprintf(w, "    %s\n", l)
				}
			}
			for _, l := range wrap(st.Where, Width-8) {
				fmt.Fprintf(w, "      %s\n", l)
			}
			if st.Count != "" {
				fmt.Fprintf(w, "      counter: %s\n", st.Count)
			}
		}
	}
	part("Guest -> host: the echo request", s.Out)
	part("Host -> guest: the echo reply", s.In)
	fmt.Fprintf(w, "\nThe device saw the round trip take %s, from the kick to the reply's\ninterrupt. Counters are the run's totals (tinyvmm run --stats).\n", micros(s.RoundTrip))
	for _, note := range s.Notes {
		for i, l := range wrap(note, Width-2) {
			if i == 0 {
				fmt.Fprintf(w, "* %s\n", l)
			} else {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
	}
}

func micros(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%d us", d.Microseconds())
}

// txWrite is the index of the event that sent the popped frames (named
// after the frame I/O: writev, uring, sendmmsg) between pop and publish,
// or -1 where the trace has none.
func txWrite(evs []Event, pop, pub int) int {
	for i := pop + 1; i < pub; i++ {
		switch e := evs[i]; {
		case e.Queue != "tx":
		case e.What == "kick", e.What == "pop", e.What == "budget":
		default:
			return i
		}
	}
	return -1
}

// wrap breaks text into lines of at most width columns, at spaces.
func wrap(text string, width int) []string { return textwrap.Columns(text, width) }
