package device

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/internal/scratchns"
	"tinyvmm/virtionet"
	"tinyvmm/virtionet/guestdrv"
)

// MQRow is one row of the multiqueue table: 64-byte frames in one
// direction with two driver threads, on one queue pair (today's device:
// the two threads share the pair's rings under a lock, like two CPUs
// sharing a queue) or on two (each thread owns a pair, each pair has its
// own worker and tap queue).
type MQRow struct {
	Direction  string    `json:"direction"` // "tx" or "rx"
	Pairs      int       `json:"pairs"`
	PPS        float64   `json:"pps"`
	PairPPS    []float64 `json:"pair_pps,omitempty"` // each pair's share, with 2 pairs
	NsPerFrame float64   `json:"worker_cpu_ns_per_frame"`
}

// mqEnv is a device of 1 or 2 pairs on a tap in a namespace of its own:
// a single-queue tap for 1 pair, a multi_queue one for 2.
type mqEnv struct {
	ns      *scratchns.NS
	dev     *virtionet.Device
	guests  []*guestdrv.Guest
	close   func()
	hostMAC net.HardwareAddr
}

func newMQEnv(pairs int) (*mqEnv, error) {
	ns, err := scratchns.New("tvmq")
	if err != nil {
		return nil, err
	}
	e := &mqEnv{ns: ns, close: func() {}}
	if pairs > 1 {
		e.hostMAC, err = ns.AddMultiQueueTap("tap0", "10.0.2.1/24")
	} else {
		e.hostMAC, err = ns.AddTap("tap0", "10.0.2.1/24")
	}
	if err == nil {
		err = ns.Do(func() error {
			var err error
			e.dev, err = openDevice(virtionet.Config{Ifname: "tap0", Queues: pairs, IO: virtionet.IOWritev, Tuning: virtionet.DefaultTuning()})
			return err
		})
	}
	if err == nil {
		err = ns.AddNeighbor("tap0", GuestIP, e.dev.MAC())
	}
	if err == nil {
		o := guestdrv.Options{Features: rxFeatures, IP: GuestIP}
		if pairs > 1 {
			var m *guestdrv.Multi
			if m, err = guestdrv.NewMulti(e.dev, guestdrv.Options{Features: rxFeatures | virtionet.FeatMQ | virtionet.FeatCtrlVQ, IP: GuestIP}, pairs); err == nil {
				e.guests, e.close = m.Pairs, m.Close
			}
		} else {
			var g *guestdrv.Guest
			if g, err = guestdrv.New(e.dev, o); err == nil {
				e.guests, e.close = []*guestdrv.Guest{g}, g.Close
			}
		}
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *mqEnv) Close() {
	e.close()
	if e.dev != nil {
		e.dev.Close()
	}
	e.ns.Close()
}

// mqThreads is the number of driver threads of every row, mqFlows the
// UDP flows each rx sending thread takes turns with, and mqProcs Go's
// GOMAXPROCS during a row.
const (
	mqFlows   = 16
	mqThreads = 2
	mqProcs   = mqThreads + 2 + 2
)

// mqRun measures one row: mqThreads driver threads, spread over the
// pairs, flood (tx: to a MAC nobody has, dropped by the host at once) or
// drain (rx: mqThreads AF_PACKET senders on the host side, each its own
// UDP flow, which the tap spreads over its queues) for d.
func mqRun(dir string, pairs int, d time.Duration) (MQRow, error) {
	row := MQRow{Direction: dir, Pairs: pairs}
	// Go's scheduler gets a P for every thread of the largest row (drivers,
	// workers) and two more, as the VMM reserves them (vmm.reserveProcs):
	// with fewer, locked threads wait for each other's P.
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), mqProcs)))
	}
	e, err := newMQEnv(pairs)
	if err != nil {
		return row, err
	}
	defer e.Close()
	locks := make([]sync.Mutex, len(e.guests))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range mqThreads {
		g, mu := e.guests[i%len(e.guests)], &locks[i%len(e.guests)]
		wg.Add(1)
		if dir == "tx" {
			frame := ethframe.AppendUDP(nil, otherMAC, g.MAC, GuestIP, HostIP, uint16(5000+i), 9, make([]byte, 64-42))
			go func() { defer wg.Done(); lockedFlood(g, mu, frame, &stop) }()
		} else {
			go func() { defer wg.Done(); lockedSink(g, mu, &stop) }()
		}
	}
	if dir == "rx" {
		for i := range mqThreads {
			fd, err := e.packetSocket()
			if err != nil {
				stop.Store(true)
				wg.Wait()
				return row, err
			}
			defer unix.Close(fd)
			// The tap spreads flows over its queues by a hash seeded at
			// boot: with a few flows per thread, a queue that gets
			// none (one in 2^31 boots) is a bug, not the draw.
			var frames [][]byte
			for k := range mqFlows {
				port := uint16(5000 + i*mqFlows + k)
				frames = append(frames, ethframe.AppendUDP(nil, e.dev.MAC(), e.hostMAC, HostIP, GuestIP, port, 9, make([]byte, 64-42)))
			}
			wg.Add(1)
			go func() { defer wg.Done(); hostFlood(fd, frames, &stop) }()
		}
	}
	time.Sleep(50 * time.Millisecond)
	qi := 1
	if dir == "rx" {
		qi = 0
	}
	s0 := e.dev.Stats()
	start := time.Now()
	time.Sleep(d)
	s1 := e.dev.Stats()
	elapsed := time.Since(start).Seconds()
	stop.Store(true)
	wg.Wait()
	frames := s1.Queues[qi].Frames - s0.Queues[qi].Frames
	row.PPS = float64(frames) / elapsed
	if frames > 0 {
		row.NsPerFrame = float64(s1.WorkerCPUNs-s0.WorkerCPUNs) / float64(frames)
	}
	for p := range s1.Pairs {
		row.PairPPS = append(row.PairPPS, float64(s1.Pairs[p].Queues[qi].Frames-s0.Pairs[p].Queues[qi].Frames)/elapsed)
	}
	if frames == 0 {
		return row, fmt.Errorf("%s %d pairs: no frames moved", dir, pairs)
	}
	return row, nil
}

func (e *mqEnv) packetSocket() (int, error) {
	var fd int
	err := e.ns.Do(func() error {
		var err error
		fd, err = packetSocket("tap0", false)
		return err
	})
	return fd, err
}

// lockedFlood is guestFlood for a pair that may be shared: each round of
// adding, kicking and reaping holds mu, as a CPU holds its tx queue's lock.
func lockedFlood(g *guestdrv.Guest, mu *sync.Mutex, frame []byte, stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for !stop.Load() {
		mu.Lock()
		n := 0
		for n < 64 && g.Queue(frame) {
			n++
		}
		if n > 0 {
			g.Kick()
		}
		if g.Poll(nil) == 0 && n == 0 {
			g.WaitTxOrRx(200 * time.Microsecond)
		}
		mu.Unlock()
	}
}

// lockedSink is guestSink for a pair that may be shared.
func lockedSink(g *guestdrv.Guest, mu *sync.Mutex, stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for !stop.Load() {
		mu.Lock()
		if g.Poll(nil) == 0 {
			g.Wait(200 * time.Microsecond)
		}
		mu.Unlock()
	}
}

func printMQ(o Options, rows []MQRow) {
	fmt.Fprintf(o.Out, "Multiqueue: 64-byte frames with %d driver threads, 1 queue pair (the threads share it\n", mqThreads)
	fmt.Fprintf(o.Out, "under a lock; single-queue tap) vs 2 pairs (a thread, a worker and a tap queue each;\n")
	fmt.Fprintf(o.Out, "multi_queue tap). tx: the guest floods a MAC nobody has; rx: %d AF_PACKET senders on the\n", mqThreads)
	fmt.Fprintf(o.Out, "host side, %d UDP flows each, which the tap spreads over its queues. %v per run;\n", mqFlows, o.MQRun)
	fmt.Fprintf(o.Out, "GOMAXPROCS %d in every row (a P per thread and two more, as the VMM reserves).\n\n", mqProcs)
	fmt.Fprintf(o.Out, "%-5s %12s %12s %8s %20s %22s\n", "dir", "1 pair pps", "2 pairs pps", "scaling", "pair 0 / pair 1 pps", "worker ns/frame 1/2")
	for _, dir := range []string{"tx", "rx"} {
		var one, two MQRow
		for _, r := range rows {
			if r.Direction == dir && r.Pairs == 1 {
				one = r
			}
			if r.Direction == dir && r.Pairs == 2 {
				two = r
			}
		}
		scale, split := 0.0, "-"
		if one.PPS > 0 {
			scale = two.PPS / one.PPS
		}
		if len(two.PairPPS) == 2 {
			split = fmt.Sprintf("%.0f / %.0f", two.PairPPS[0], two.PairPPS[1])
		}
		fmt.Fprintf(o.Out, "%-5s %12.0f %12.0f %7.2fx %20s %22s\n", dir, one.PPS, two.PPS, scale, split,
			fmt.Sprintf("%.0f / %.0f", one.NsPerFrame, two.NsPerFrame))
	}
	fmt.Fprintln(o.Out)
}
