package device

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/virtionet"
)

// LatencyRow is one row of experiment 002's table: request latency through the
// guest while it floods tx with 1-byte UDP payloads, at one tx packet weight.
type LatencyRow struct {
	Weight int `json:"tx_weight_pkts"` // 0: unlimited (vhost-net before the weight: "Origin")
	// Yield is the device's TxYieldPkts: 0 in the sweep (vhost-net's
	// rule, the seed's), tinyvmm's default in the row that shows it.
	Yield   int     `json:"tx_yield_pkts,omitempty"`
	MinMs   float64 `json:"min_ms"`
	AvgMs   float64 `json:"avg_ms"`
	MaxMs   float64 `json:"max_ms"`
	P99Ms   float64 `json:"p99_ms"`
	TxPPS   float64 `json:"tx_pps"`
	Samples int     `json:"samples"`
	Lost    int     `json:"lost"`
	// AvgMsRange is the lowest and highest run's AvgMs.
	AvgMsRange Spread `json:"avg_ms_range"`
}

// Spread is the lowest and the highest value of a cell's runs. Where two
// cells' spreads overlap, those runs cannot tell the cells apart.
type Spread struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// Known reports whether the spread was measured (a row made by hand, or
// from an older JSON file, has none).
func (s Spread) Known() bool { return s.Max > 0 }

// Overlaps reports whether s and o share a value.
func (s Spread) Overlaps(o Spread) bool { return s.Min <= o.Max && o.Min <= s.Max }

// spread is the lowest and highest f over rows.
func spread[T any](rows []T, f func(T) float64) Spread {
	if len(rows) == 0 {
		return Spread{}
	}
	s := Spread{Min: f(rows[0]), Max: f(rows[0])}
	for _, r := range rows[1:] {
		s.Min, s.Max = min(s.Min, f(r)), max(s.Max, f(r))
	}
	return s
}

// BatchRow is one row of experiment 004's table: rx frames/s at an rx batch.
type BatchRow struct {
	Backend        string  `json:"backend"` // "tap" or "af_packet"
	Batch          int     `json:"rx_batch"`
	Mergeable      bool    `json:"mrg_rxbuf"`
	PPS            float64 `json:"rx_pps"`
	FramesPerBatch float64 `json:"frames_per_batch"`
	// Batches is the rx batch-size histogram (summed over the runs of a
	// table row).
	Batches map[string]uint64 `json:"batches,omitempty"`
	// NsPerFrame is the worker thread's CPU time per frame.
	NsPerFrame float64 `json:"worker_cpu_ns_per_frame"`
	// NoBuffersPerS is how often per second the guest's rx ring ran dry.
	NoBuffersPerS float64 `json:"rx_ring_empty_per_s"`
	// PPSRange and NsRange are the lowest and highest run's.
	PPSRange Spread `json:"rx_pps_range"`
	NsRange  Spread `json:"worker_cpu_ns_per_frame_range"`
}

// ThresholdRow is one row of experiment 000's table: tx frames/s at a notify
// threshold.
type ThresholdRow struct {
	Threshold  int     `json:"notify_threshold"`
	PPS        float64 `json:"tx_pps"`
	NsPerFrame float64 `json:"worker_cpu_ns_per_frame"`
	// PPSRange and NsRange are the lowest and highest run's.
	PPSRange Spread `json:"tx_pps_range"`
	NsRange  Spread `json:"worker_cpu_ns_per_frame_range"`
}

// PollRow is one row of the tx poll table: a 64-byte tx flood at one
// --poll-us (0: off, a kick every NotifyThreshold chains during bursts).
type PollRow struct {
	PollUs        int     `json:"poll_us"`
	PPS           float64 `json:"tx_pps"`
	NsPerFrame    float64 `json:"worker_cpu_ns_per_frame"`
	KicksPerFrame float64 `json:"kicks_per_frame"`
}

// pollRun measures tx frames/s and the guest's kicks per frame in tx poll
// mode: kicks are what cost a VM exit each on a real KVM.
func pollRun(us int, d time.Duration) (PollRow, error) {
	tun := virtionet.DefaultTuning()
	tun.PollUs = us
	m, err := txRate(virtionet.IOWritev, tun, 0, otherMAC, 64, d)
	row := PollRow{PollUs: us, PPS: m.pps, NsPerFrame: m.nsPerFrame}
	if m.queue.Frames > 0 {
		row.KicksPerFrame = float64(m.queue.Kicks) / float64(m.queue.Frames)
	}
	return row, err
}

// seed002 measures one weight and tx yield (Tuning.TxYieldPkts): the
// guest floods, a host-side UDP pinger sends a request every interval to
// the guest's echo port and times the answer.
func seed002(weight, yield int, d, interval time.Duration) (LatencyRow, error) {
	row := LatencyRow{Weight: weight, Yield: yield}
	tun := virtionet.DefaultTuning()
	tun.TxWeightPkts = weight
	tun.TxYieldPkts = yield
	env, err := NewEnv(tun, 0)
	if err != nil {
		return row, err
	}
	defer env.Close()
	sink, err := env.UDPSocket(9, time.Second)
	if err != nil {
		return row, err
	}
	defer unix.Close(sink)
	pinger, err := env.UDPSocket(7000, time.Second)
	if err != nil {
		return row, err
	}
	defer unix.Close(pinger)

	g := env.Guest
	frame := ethframe.AppendUDP(nil, env.HostMAC, g.MAC, GuestIP, HostIP, 5000, 9, []byte{'x'})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); guestFlood(g, frame, &stop) }()
	time.Sleep(50 * time.Millisecond) // let the flood fill the ring
	before := env.Dev.Stats().Queues[1].Frames
	start := time.Now()
	var rtts []time.Duration
	to := &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 15}, Port: ethframe.EchoPort}
	buf := make([]byte, 64)
	for seq := uint64(0); time.Since(start) < d; seq++ {
		var req [8]byte
		binary.BigEndian.PutUint64(req[:], seq)
		t0 := time.Now()
		if err := unix.Sendto(pinger, req[:], 0, to); err != nil {
			row.Lost++
			continue
		}
		for {
			n, _, err := unix.Recvfrom(pinger, buf, 0)
			if err != nil {
				row.Lost++
				break
			}
			if n == 8 && binary.BigEndian.Uint64(buf) == seq {
				rtts = append(rtts, time.Since(t0))
				break
			}
		}
		time.Sleep(interval)
	}
	elapsed := time.Since(start)
	row.TxPPS = float64(env.Dev.Stats().Queues[1].Frames-before) / elapsed.Seconds()
	stop.Store(true)
	wg.Wait()
	if len(rtts) == 0 {
		return row, fmt.Errorf("weight %s: no echo answered in %v", LatencyRowName(weight, yield), d)
	}
	row.Samples = len(rtts)
	row.MinMs, row.AvgMs, row.MaxMs, row.P99Ms = latencyStats(rtts)
	return row, nil
}

func latencyStats(d []time.Duration) (lo, avg, hi, p99 float64) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	ms := func(v time.Duration) float64 { return float64(v) / 1e6 }
	i99 := (len(d)*99 + 99) / 100
	return ms(d[0]), ms(sum / time.Duration(len(d))), ms(d[len(d)-1]), ms(d[min(i99, len(d))-1])
}

// rxFeatures are acked for the rx table: no checksum or TSO offloads, so
// that one 2048-byte buffer holds any frame with and without MRG_RXBUF.
const rxFeatures = virtionet.FeatVersion1 | virtionet.FeatMAC | virtionet.FeatStatus | virtionet.FeatMTU |
	virtionet.FeatEventIdx | virtionet.FeatIndirectDesc

// seed004 measures rx frames/s at one batch size: a host-side AF_PACKET
// sender floods 64-byte UDP frames at the guest through the tap.
func seed004(backend string, batch int, mergeable bool, d time.Duration) (BatchRow, error) {
	row := BatchRow{Backend: backend, Batch: batch, Mergeable: mergeable}
	tun := virtionet.DefaultTuning()
	tun.RxBatch = batch
	feat := uint64(rxFeatures)
	if mergeable {
		feat |= virtionet.FeatMrgRxBuf
	}
	m, err := rxRate(backend == "af_packet", virtionet.IOWritev, tun, feat, 64, d)
	if err != nil {
		return row, err
	}
	row.PPS, row.NsPerFrame = m.pps, m.nsPerFrame
	row.FramesPerBatch = framesPerBatch(m.queue)
	row.Batches = m.queue.Batches
	row.NoBuffersPerS = m.noBuffersPerS
	return row, nil
}

// rate is what one timed run measured on a queue.
type rate struct {
	pps           float64              // frames per wall-clock second
	nsPerFrame    float64              // worker CPU per frame
	noBuffersPerS float64              // rx runs that found the guest's ring empty, per second
	queue         virtionet.QueueStats // counters of the run (frames, batches, system calls)
	io            string               // the device's tx mechanism
}

// measure samples the device's counters of queue qi around d.
func measure(dev *virtionet.Device, qi int, d time.Duration) rate {
	s0 := dev.Stats()
	start := time.Now()
	time.Sleep(d)
	s1 := dev.Stats()
	elapsed := time.Since(start)
	q := s1.Queues[qi]
	q.Frames -= s0.Queues[qi].Frames
	q.Syscalls -= s0.Queues[qi].Syscalls
	q.Kicks -= s0.Queues[qi].Kicks
	for k, v := range s0.Queues[qi].Batches {
		q.Batches[k] -= v
	}
	r := rate{pps: float64(q.Frames) / elapsed.Seconds(), queue: q, io: string(s1.IO),
		noBuffersPerS: float64(q.NoBuffers-s0.Queues[qi].NoBuffers) / elapsed.Seconds()}
	if q.Frames > 0 {
		r.nsPerFrame = float64(s1.WorkerCPUNs-s0.WorkerCPUNs) / float64(q.Frames)
	}
	return r
}

// rxRate floods the guest from the host side for d and measures what the
// guest received, with the device's Config.IO.
func rxRate(afPacket bool, io virtionet.IOMode, tun virtionet.Tuning, feat uint64, frameLen int, d time.Duration) (rate, error) {
	env, err := newEnvIO(afPacket, io, tun, feat)
	if err != nil {
		return rate{}, err
	}
	defer env.Close()
	fd, err := env.PacketSocket()
	if err != nil {
		return rate{}, err
	}
	defer unix.Close(fd)
	payload := make([]byte, max(frameLen-ethframe.EthLen-ethframe.IPv4Len-ethframe.UDPLen, 1))
	frame := ethframe.AppendUDP(nil, env.Guest.MAC, env.HostMAC, HostIP, GuestIP, 5000, 9, payload)
	var stopSend, stopSink atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); hostFlood(fd, [][]byte{frame}, &stopSend) }()
	go func() { defer wg.Done(); guestSink(env.Guest, &stopSink) }()
	time.Sleep(30 * time.Millisecond)
	m := measure(env.Dev, 0, d)
	stopSend.Store(true)
	stopSink.Store(true)
	wg.Wait()
	return m, nil
}

// framesPerBatch is the mean batch size from the histogram's buckets,
// each taken at its midpoint (exact for 1).
func framesPerBatch(s virtionet.QueueStats) float64 {
	var batches uint64
	for _, n := range s.Batches {
		batches += n
	}
	if batches == 0 {
		return 0
	}
	return float64(s.Frames) / float64(batches)
}

// seed000 measures tx frames/s at one notify threshold: the guest floods
// 64-byte frames to a MAC nobody has, which the host drops at once.
func seed000(thr int, d time.Duration) (ThresholdRow, error) {
	row := ThresholdRow{Threshold: thr}
	tun := virtionet.DefaultTuning()
	tun.NotifyThreshold = thr
	m, err := txRate(virtionet.IOWritev, tun, 0, otherMAC, 64, d)
	row.PPS, row.NsPerFrame = m.pps, m.nsPerFrame
	return row, err
}

// txRate has the guest flood frameLen-byte UDP frames to dst for d and
// measures what the device wrote to the tap, with the device's Config.IO.
func txRate(io virtionet.IOMode, tun virtionet.Tuning, feat uint64, dst []byte, frameLen int, d time.Duration) (rate, error) {
	env, err := newEnvIO(false, io, tun, feat)
	if err != nil {
		return rate{}, err
	}
	defer env.Close()
	if dst == nil {
		dst = env.HostMAC
	}
	sink, err := env.UDPSocket(9, time.Second)
	if err != nil {
		return rate{}, err
	}
	defer unix.Close(sink)
	payload := make([]byte, max(frameLen-ethframe.EthLen-ethframe.IPv4Len-ethframe.UDPLen, 1))
	frame := ethframe.AppendUDP(nil, dst, env.Guest.MAC, GuestIP, HostIP, 5000, 9, payload)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); guestFlood(env.Guest, frame, &stop) }()
	time.Sleep(30 * time.Millisecond)
	m := measure(env.Dev, 1, d)
	stop.Store(true)
	wg.Wait()
	return m, nil
}
