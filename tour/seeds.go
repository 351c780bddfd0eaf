package tour

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"tinyvmm/bench/device"
	"tinyvmm/virtionet"
)

// SeedOptions bound the live runs of the three ideas; a zero field takes
// the tour's default. The experiments are bench/device's own, run short.
type SeedOptions struct {
	LatencyRun   time.Duration // per tx weight and run (400 ms)
	BatchRun     time.Duration // per rx batch cell and run, 8 cells (200 ms)
	ThresholdRun time.Duration // per notification threshold and run, 7 of them (150 ms)
	// Log gets one line as each run starts.
	Log io.Writer
}

func (o *SeedOptions) defaults() {
	if o.LatencyRun <= 0 {
		o.LatencyRun = 400 * time.Millisecond
	}
	if o.BatchRun <= 0 {
		o.BatchRun = 200 * time.Millisecond
	}
	if o.ThresholdRun <= 0 {
		o.ThresholdRun = 150 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// The sweeps of the tour: the rows that tell each idea, few enough to
// take seconds.
var (
	tourWeights    = []int{0, 64, virtionet.DefaultWeightPkts}
	tourThresholds = []int{1, 2, 4, 8, 16, 32, 64}
)

// tourRuns is how often each cell runs, interleaved with the others (all
// cells once, then all again), so that a passing load spoils one run of
// every cell rather than every run of one; the tables show the median and
// the spread, and a finding whose cells' spreads overlap says so.
const tourRuns = 3

// Seeds is what the live runs measured.
type Seeds struct {
	Weights    []device.LatencyRow
	Batches    []device.BatchRow
	Thresholds []device.ThresholdRow
	Failed     []string
	Opt        SeedOptions // the options the runs had, defaults filled in
	Took       time.Duration
}

// RunSeeds runs experiments 002, 004 and 000 of `tinyvmm bench device`
// with the tour's short sweeps, tourRuns times each, interleaved: the Go driver plays the guest,
// the device has a tap (or an af_packet socket on a veth) in a network
// namespace each run makes and removes. It needs root, not KVM.
func RunSeeds(o SeedOptions) (Seeds, error) {
	o.defaults()
	s := Seeds{Opt: o}
	start := time.Now()
	run := func(only, what string, d time.Duration) (*device.Results, error) {
		fmt.Fprintf(o.Log, "tour: live run: %s\n", what)
		r, err := device.Run(device.Options{
			Runs: tourRuns, Only: only, Out: io.Discard,
			Weights: tourWeights, LatencyRun: d,
			BatchRun:   d,
			Thresholds: tourThresholds, ThresholdRun: d,
		})
		if err != nil {
			return nil, err
		}
		s.Failed = append(s.Failed, r.Failed...)
		return r, nil
	}
	r, err := run("002", fmt.Sprintf("tx weights %v under a flood, %d runs of %s each", tourWeights, tourRuns, secs(o.LatencyRun)), o.LatencyRun)
	if err != nil {
		return s, err
	}
	s.Weights = r.Seed002
	if r, err = run("004", fmt.Sprintf("rx batch 1 and 64, 8 cells, %d runs of %s each", tourRuns, secs(o.BatchRun)), o.BatchRun); err != nil {
		return s, err
	}
	s.Batches = r.Seed004
	if r, err = run("000", fmt.Sprintf("notification thresholds %v, %d runs of %s each", tourThresholds, tourRuns, secs(o.ThresholdRun)), o.ThresholdRun); err != nil {
		return s, err
	}
	s.Thresholds = r.Seed000
	s.Took = time.Since(start)
	return s, nil
}

// Screen is one idea told with its live numbers: the same in the text and
// in the page.
type Screen struct {
	Title string
	From  string   // the Linux patch the idea comes from
	Idea  []string // paragraphs
	Where []string // "file.go Func, Func" each
	Table [][]string
	// RowHeads: the table's first column names its rows (a table on its
	// side), as well as its first row naming the columns.
	RowHeads bool
	// Finding says what this run's numbers show.
	Finding string
}

// Screens tells the three ideas with s's numbers.
func (s Seeds) Screens() []Screen {
	return []Screen{s.weightScreen(), s.batchScreen(), s.thresholdScreen()}
}

func weightName(w int) string {
	if w == 0 {
		return "none"
	}
	return fmt.Sprint(w)
}

func (s Seeds) weightScreen() Screen {
	sc := Screen{
		Title: "Tx weights: a flooding guest must not starve rx",
		From:  "vhost-net: add limitation of sent packets for tx polling (seed 002)",
		Idea: []string{
			fmt.Sprintf("vhost-net ends one run of its tx loop after 512 KiB (VHOST_NET_WEIGHT) and requeues tx behind rx. With 1-byte UDP frames that is thousands of frames, and rx waits behind them (the patch's 'Origin', 'none' below): the patch added a packet weight. tinyvmm stops tx after %d frames or 512 KiB, whichever comes first.", virtionet.DefaultWeightPkts),
			fmt.Sprintf("tinyvmm goes one step further: every %d frames a tx run looks whether frames wait for the guest, and lets rx go first if some do (the '+y%d' row; the other rows run without it, as vhost-net does).", virtionet.DefaultTxYieldPkts, virtionet.DefaultTxYieldPkts),
			fmt.Sprintf("Live: the guest floods 1-byte UDP while the host sends it a UDP echo request every 5 ms and times the answer; %d runs of %s per weight. 'answers' counts the echo requests answered over those runs: each wait in the table is one of them.", tourRuns, secs(s.Opt.LatencyRun)),
		},
		Where: []string{"virtionet/worker.go overWeight, worker.enqueue", "virtionet/tx.go worker.handleTx, worker.rxWaiting"},
		Table: [][]string{{"tx weight", "min ms", "avg ms", "p99 ms", "max ms", "tx frames/s", "answers"}},
	}
	var none, def, yield *device.LatencyRow
	for i, r := range s.Weights {
		name := weightName(r.Weight)
		if r.Yield > 0 {
			name = fmt.Sprintf("%s+y%d", name, r.Yield)
		}
		sc.Table = append(sc.Table, []string{name, fmt.Sprintf("%.2f", r.MinMs), fmt.Sprintf("%.2f", r.AvgMs),
			fmt.Sprintf("%.2f", r.P99Ms), fmt.Sprintf("%.2f", r.MaxMs), fmt.Sprintf("%.0f", r.TxPPS), fmt.Sprint(r.Samples)})
		switch {
		case r.Yield > 0:
			yield = &s.Weights[i]
		case r.Weight == 0:
			none = &s.Weights[i]
		case r.Weight == virtionet.DefaultWeightPkts:
			def = &s.Weights[i]
		}
	}

	switch {
	case none == nil || def == nil || none.Samples == 0 || def.Samples == 0:
		sc.Finding = "A run failed, so there is nothing to compare (see the notes)."
	case tellsApart(def.AvgMsRange, none.AvgMsRange) == inconclusive:
		sc.Finding = fmt.Sprintf("Inconclusive: the average wait with the weight at %d (%s ms over %d runs) and with none (%s ms) overlap, so these runs cannot tell them apart. The flood sets the wait only while it fills the ring, which a busy machine may not let it do; 'tinyvmm bench device --only 002' runs longer.",
			def.Weight, rangeText(def.AvgMsRange, 2), tourRuns, rangeText(none.AvgMsRange, 2))
	case def.AvgMs < 0.9*none.AvgMs:
		sc.Finding = fmt.Sprintf("With the weight at %d an echo request waited %.2f ms on average (p99 %.2f) against %.2f ms (p99 %.2f) with none: %.1fx sooner, while the flood kept %.0f%% of its rate.",
			def.Weight, def.AvgMs, def.P99Ms, none.AvgMs, none.P99Ms, none.AvgMs/def.AvgMs, 100*def.TxPPS/max(none.TxPPS, 1))
	default:
		sc.Finding = fmt.Sprintf("In this short run the weight did not cut the wait (%.2f ms on average at %d, %.2f ms with none): on a busy machine one run is noisy; 'tinyvmm bench device --only 002' runs each weight 3 times.",
			def.AvgMs, def.Weight, none.AvgMs)
	}
	if yield != nil && yield.Samples > 0 && def != nil && def.Samples > 0 {
		sc.Finding += fmt.Sprintf(" Yielding to rx as well: %.2f ms on average (p99 %.2f) at %.0f tx frames/s.", yield.AvgMs, yield.P99Ms, yield.TxPPS)
	}
	return sc
}

func (s Seeds) batchScreen() Screen {
	sc := Screen{
		Title: "Rx batching: one publish and one interrupt per batch",
		From:  "vhost_net: batch dequeuing from skb array (seed 004)",
		Idea: []string{
			fmt.Sprintf("The patch has vhost-net take up to 64 frames from the socket at once (VHOST_RX_BATCH) instead of one per call. tinyvmm's worker moves up to %d frames per wake, then publishes used.idx and signals the guest once for all of them.", virtionet.DefaultRxBatch),
			fmt.Sprintf("Live: an AF_PACKET sender on the host side floods 64-byte frames at the guest, %s per cell. A tap hands over one frame per read; the af_packet backend reads a batch per recvmmsg. Small buffers hold one frame each; mergeable ones (MRG_RXBUF) may span several.", secs(s.Opt.BatchRun)),
		},
		Where: []string{"virtionet/rx.go worker.handleRx, worker.rxBatch", "virtionet/worker.go worker.publish, worker.signal"},
		Table: [][]string{{"backend", "buffers", "batch 1/s", "batch 64/s", "gain", "frames/batch", "ns/frame 1/64"}},
	}
	var best struct {
		gain           float64
		name           string
		one, all       float64
		oneRow, allRow device.BatchRow
	}
	best.gain = -1e9
	for _, be := range []string{"tap", "af_packet"} {
		for _, mrg := range []bool{false, true} {
			var one, many *device.BatchRow
			for i, r := range s.Batches {
				if r.Backend == be && r.Mergeable == mrg {
					if r.Batch == 1 {
						one = &s.Batches[i]
					} else {
						many = &s.Batches[i]
					}
				}
			}
			if one == nil || many == nil {
				continue
			}
			bufs := "small"
			if mrg {
				bufs = "mergeable"
			}
			gain := "-"
			if one.PPS > 0 && many.PPS > 0 {
				g := math.Round(100 * (many.PPS - one.PPS) / one.PPS)
				if g == 0 {
					g = 0 // not "-0%"
				}
				gain = fmt.Sprintf("%+.0f%%", g)
				if tellsApart(many.PPSRange, one.PPSRange) == inconclusive {
					gain += "?"
				}
				if g > best.gain {
					best.gain, best.name, best.one, best.all = g, be+" with "+bufs+" buffers", one.PPS, many.PPS
					best.oneRow, best.allRow = *one, *many
				}
			}
			sc.Table = append(sc.Table, []string{be, bufs, fmt.Sprintf("%.0f", one.PPS), fmt.Sprintf("%.0f", many.PPS), gain,
				fmt.Sprintf("%.1f", many.FramesPerBatch), fmt.Sprintf("%.0f/%.0f", one.NsPerFrame, many.NsPerFrame)})
		}
	}
	switch {
	case best.name == "":
		sc.Finding = "A run failed, so there is nothing to compare (see the notes)."
	case tellsApart(best.allRow.PPSRange, best.oneRow.PPSRange) == inconclusive:
		sc.Finding = fmt.Sprintf("Inconclusive in frames/s: even on %s, the best case, batch 64 (%s frames/s over %d runs) and batch 1 (%s) overlap, so these runs cannot tell them apart (a gain marked ? is within the runs' spread). When the sender, not the device, sets the pace, the device's saving cannot show as frames/s; it shows as the worker's CPU time per frame: %s.",
			best.name, rangeText(best.allRow.PPSRange, 0), tourRuns, rangeText(best.oneRow.PPSRange, 0), cpuPerFrameText(best.oneRow.NsPerFrame, best.allRow.NsPerFrame, best.oneRow.NsRange, best.allRow.NsRange, "batch 1", "batch 64"))
	case best.gain < 5:
		sc.Finding = fmt.Sprintf("In this short run batching gained at most %+.0f%% (%s): on a busy machine one run is noisy; 'tinyvmm bench device --only 004' runs each cell 3 times. The patch measured +19.6%% (small) and +14.7%% (mergeable) in vhost-net.",
			best.gain, best.name)
	default:
		sc.Finding = fmt.Sprintf("Batching did best on %s: %.0f frames/s against %.0f one at a time (%+.0f%%). The patch measured +19.6%% (small) and +14.7%% (mergeable) in vhost-net. ns/frame is the worker thread's CPU time per frame.",
			best.name, best.all, best.one, best.gain)
	}
	return sc
}

func (s Seeds) thresholdScreen() Screen {
	sc := Screen{
		Title: "The notification threshold: fewer kicks, fewer publishes",
		From:  "virtio-net: xsk zero copy xmit kick by threshold (seed 000)",
		Idea: []string{
			"The patch has the guest's driver kick the device once every 8 frames (xsk_kick_thr) instead of after each; its table of frames/s by threshold 1 to 64 is best from 3 to 13 and uneven above.",
			fmt.Sprintf("tinyvmm's device does it from its side: during a tx burst it moves avail_event N-1 ahead, so the guest kicks once per N (default %d), and publishes used entries every N chains where its send groups (--tx-yield-pkts) are smaller. Live: the guest floods 64-byte frames the host drops at once; %s per threshold.", virtionet.DefaultNotifyThreshold, secs(s.Opt.ThresholdRun)),
		},
		Where: []string{"virtionet/tx.go worker.handleTx, worker.txGroup", "virtio/virtqueue.go Queue.EnableNotify, Queue.PublishUsed"},
	}
	thr, pps, spr, ns := []string{"threshold"}, []string{"kframes/s"}, []string{"spread"}, []string{"ns/frame"}
	var one, best, def device.ThresholdRow
	for _, r := range s.Thresholds {
		thr = append(thr, fmt.Sprint(r.Threshold))
		pps = append(pps, fmt.Sprintf("%.0f", r.PPS/1000))
		spr = append(spr, spreadText(r.PPSRange, r.PPS))
		ns = append(ns, fmt.Sprintf("%.0f", r.NsPerFrame))
		if r.Threshold == 1 {
			one = r
		}
		if r.Threshold == virtionet.DefaultNotifyThreshold {
			def = r
		}
		if r.PPS > best.PPS {
			best = r
		}
	}
	sc.Table, sc.RowHeads = [][]string{thr, pps, ns}, true
	if best.PPSRange.Known() {
		sc.Table = [][]string{thr, pps, spr, ns}
	}
	var peers []string // thresholds the runs cannot tell from the peak
	for _, r := range s.Thresholds {
		if r.Threshold != best.Threshold && tellsApart(r.PPSRange, best.PPSRange) == inconclusive {
			peers = append(peers, fmt.Sprint(r.Threshold))
		}
	}
	switch {
	case one.PPS <= 0 || best.PPS <= 0:
		sc.Finding = "A run failed, so there is nothing to compare (see the notes)."
	case best.Threshold != 1 && tellsApart(best.PPSRange, one.PPSRange) == inconclusive:
		sc.Finding = fmt.Sprintf("Inconclusive in frames/s: the peak, threshold %d (%s kframes/s over %d runs), and threshold 1 (%s) overlap, so these runs cannot tell the thresholds apart. When the sender, not the device, sets the pace, fewer kicks cannot show as frames/s; they show as the worker's CPU time per frame: %s.",
			best.Threshold, rangeText(scale(best.PPSRange, 1e-3), 0), tourRuns, rangeText(scale(one.PPSRange, 1e-3), 0),
			cpuPerFrameText(one.NsPerFrame, def.NsPerFrame, one.NsRange, def.NsRange, "threshold 1", fmt.Sprintf("the default, %d,", virtionet.DefaultNotifyThreshold)))
	case best.Threshold != 1 && len(peers) > 0:
		sc.Finding = fmt.Sprintf("The rate peaked at threshold %d, %.0f frames/s, %.2fx threshold 1 (above it in every run); the runs cannot tell threshold %s from the peak (their spreads overlap). The default, %d, ran at %.0f. ns/frame is the worker thread's CPU time per frame, steadier than the rate on a shared machine.",
			best.Threshold, best.PPS, best.PPS/one.PPS, strings.Join(peers, ", "), virtionet.DefaultNotifyThreshold, def.PPS)
	default:
		sc.Finding = fmt.Sprintf("The rate peaked at threshold %d, %.0f frames/s, %.2fx threshold 1; the default, %d, ran at %.0f. ns/frame is the worker thread's CPU time per frame, steadier than the rate on a shared machine.",
			best.Threshold, best.PPS, best.PPS/one.PPS, virtionet.DefaultNotifyThreshold, def.PPS)
	}
	return sc
}

func seedsIntro(s Seeds) string {
	return fmt.Sprintf("Three ideas from Linux's vhost-net and virtio-net make the worker fair and cheap. Each comes here with a short live run of 'tinyvmm bench device' on the same device: the Go driver plays the guest on a thread of its own, with a tap (or an af_packet socket) in a network namespace made for the run. There is no VM, so the numbers are the device's own; the three runs took %.0f s.", s.Took.Seconds())
}

// RenderSeeds writes the three screens, each under Width columns.
func RenderSeeds(w io.Writer, s Seeds) {
	fmt.Fprintln(w)
	for _, l := range wrap(seedsIntro(s), Width) {
		fmt.Fprintln(w, l)
	}
	for i, sc := range s.Screens() {
		head := fmt.Sprintf("== %d/3  %s ", i+1, sc.Title)
		fmt.Fprintf(w, "\n%s%s\n", head, strings.Repeat("=", max(Width-len(head), 0)))
		for _, l := range wrap("From: "+sc.From, Width) {
			fmt.Fprintln(w, l)
		}
		for _, p := range sc.Idea {
			fmt.Fprintln(w)
			for _, l := range wrap(p, Width) {
				fmt.Fprintln(w, l)
			}
		}
		fmt.Fprintln(w)
		for _, where := range sc.Where {
			fmt.Fprintf(w, "  read: %s\n", where)
		}
		fmt.Fprintln(w)
		writeTable(w, sc.Table)
		fmt.Fprintln(w)
		for _, l := range wrap(sc.Finding, Width) {
			fmt.Fprintln(w, l)
		}
	}
	for _, f := range s.Failed {
		for i, l := range wrap("run failed: "+f, Width-2) {
			if i == 0 {
				fmt.Fprintf(w, "* %s\n", l)
			} else {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
	}
}

// writeTable writes rows in columns, two spaces apart, indented by two:
// numbers right-aligned, words left-aligned.
func writeTable(w io.Writer, rows [][]string) {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(c))
		}
	}
	left := leftColumns(rows)
	for _, r := range rows {
		var b strings.Builder
		b.WriteString(" ")
		for i, c := range r {
			b.WriteString(" ")
			if i > 0 {
				b.WriteString(" ")
			}
			if left[i] {
				fmt.Fprintf(&b, "%-*s", widths[i], c)
			} else {
				fmt.Fprintf(&b, "%*s", widths[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// leftColumns says which columns hold words: the first, and any whose
// cells below the header do not start like a number.
func leftColumns(rows [][]string) map[int]bool {
	left := map[int]bool{0: true}
	for _, r := range rows[min(1, len(rows)):] {
		for i, c := range r {
			if c != "" && !strings.ContainsRune("0123456789+-.", rune(c[0])) {
				left[i] = true
			}
		}
	}
	return left
}

// verdict is what a cell's runs say against another's.
type verdict int

const (
	unknown      verdict = iota // no spread measured: the medians speak alone
	apart                       // every run of one beat every run of the other
	inconclusive                // the spreads overlap
)

func tellsApart(a, b device.Spread) verdict {
	switch {
	case !a.Known() || !b.Known():
		return unknown
	case a.Overlaps(b):
		return inconclusive
	}
	return apart
}

// rangeText writes a spread as "1.20-1.45".
func rangeText(s device.Spread, decimals int) string {
	return fmt.Sprintf("%.*f-%.*f", decimals, s.Min, decimals, s.Max)
}

// spreadText writes a spread as a share of the median, "±7%"; "-" where none.
func spreadText(s device.Spread, median float64) string {
	if !s.Known() || median <= 0 {
		return "-"
	}
	return fmt.Sprintf("±%.0f%%", 50*(s.Max-s.Min)/median)
}

func scale(s device.Spread, f float64) device.Spread {
	return device.Spread{Min: s.Min * f, Max: s.Max * f}
}

// cpuPerFrameText compares the worker's CPU time per frame of two cells,
// and says whether the runs tell them apart.
func cpuPerFrameText(a, b float64, ar, br device.Spread, aName, bName string) string {
	if a <= 0 || b <= 0 {
		return "not measured here"
	}
	text := fmt.Sprintf("%.0f ns with %s, %.0f ns with %s (%+.0f%%)", a, aName, b, bName, 100*(b-a)/a)
	switch tellsApart(ar, br) {
	case apart:
		text += ", apart in every run"
	case inconclusive:
		text += ", though these too overlap"
	}
	return text
}

// secs writes d as "0.8 s".
func secs(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}
