// Package device is the device-level benchmark of virtionet (`tinyvmm bench
// device`): it runs the experiments of the three Linux patches in
// shared/seeds (000, 002, 004; hence the names) on tinyvmm's own
// device, with the Go driver as the guest and a tap in a namespace of its
// own, and prints their tables, writes JSON and draws a plot.
package device

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"tinyvmm/internal/scratchns"
	"tinyvmm/internal/stats"
	"tinyvmm/virtionet"
)

// Options of Run; the zero value of a field means its default.
type Options struct {
	Runs int // runs per cell, the median is shown (3)

	Weights      []int         // seed 002 tx packet weights; 0 is unlimited
	LatencyRun   time.Duration // seed 002 time per run (1 s)
	PingEvery    time.Duration // seed 002 pause between requests (5 ms)
	BatchRun     time.Duration // seed 004 time per run (1 s)
	Thresholds   []int         // seed 000 notify thresholds (1..64)
	ThresholdRun time.Duration // seed 000 time per run (0.2 s)
	BackendRun   time.Duration // backend mechanism time per run (0.5 s)

	Polls   []int         // tx poll mode: --poll-us values (0 is off)
	PollRun time.Duration // poll sweep time per run (0.5 s)
	MQRun   time.Duration // multiqueue time per run (1 s)

	Only string // "002", "004", "000", "poll" or "backend" to run one table; "" runs all

	JSON string // results file ("" for none)
	Plot string // SVG file ("" for none)
	Out  io.Writer
}

// Results is what Run measured; it is also the JSON written.
type Results struct {
	Machine Machine        `json:"machine"`
	Runs    int            `json:"runs_per_cell"`
	Seed002 []LatencyRow   `json:"seed002_weight_latency,omitempty"`
	Seed004 []BatchRow     `json:"seed004_rx_batch,omitempty"`
	Seed000 []ThresholdRow `json:"seed000_notify_threshold,omitempty"`
	Poll    []PollRow      `json:"tx_poll,omitempty"`
	Backend []BackendRow   `json:"backend_mechanisms,omitempty"`
	DevMech []DevMechRow   `json:"device_mechanisms,omitempty"`
	MQ      []MQRow        `json:"multiqueue,omitempty"`
	Failed  []string       `json:"failed_runs,omitempty"`
	Seconds float64        `json:"seconds"`
}

func (o *Options) defaults() {
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Weights == nil {
		o.Weights = []int{0, 64, 128, 256, 512, 1024, 2048, 4096}
	}
	if o.LatencyRun <= 0 {
		o.LatencyRun = time.Second
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 5 * time.Millisecond
	}
	if o.BatchRun <= 0 {
		o.BatchRun = time.Second
	}
	if o.Thresholds == nil {
		for i := 1; i <= 64; i++ {
			o.Thresholds = append(o.Thresholds, i)
		}
	}
	if o.ThresholdRun <= 0 {
		o.ThresholdRun = 200 * time.Millisecond
	}
	if o.Polls == nil {
		o.Polls = []int{0, 20, 50, 100, 200, 500}
	}
	if o.PollRun <= 0 {
		o.PollRun = 500 * time.Millisecond
	}
	if o.MQRun <= 0 {
		o.MQRun = time.Second
	}
	if o.BackendRun <= 0 {
		o.BackendRun = 500 * time.Millisecond
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
}

// Run runs the experiments, interleaving the runs of each table's rows so
// that drift on a shared machine spreads over all of them, and reports.
func Run(o Options) (*Results, error) {
	if why := scratchns.Usable(); why != "" {
		return nil, fmt.Errorf("the device benchmark %s (it makes its own network namespace and tap)", why)
	}
	o.defaults()
	start := time.Now()
	r := &Results{Machine: describeMachine(), Runs: o.Runs}
	fmt.Fprintf(o.Out, "tinyvmm device benchmark\n%s\neach cell is the median of %d runs\n\n", r.Machine, o.Runs)
	fail := func(what string, err error) {
		msg := fmt.Sprintf("%s: %v", what, err)
		r.Failed = append(r.Failed, msg)
		fmt.Fprintln(o.Out, "run failed:", msg)
	}
	if o.Only == "" || o.Only == "002" {
		// The sweep under vhost-net's rule (no yield), as the seed; then
		// the default weight with tinyvmm's default yield, beyond it.
		type cell struct{ weight, yield int }
		var cells []cell
		for _, w := range o.Weights {
			cells = append(cells, cell{w, 0})
		}
		if slices.Contains(o.Weights, virtionet.DefaultWeightPkts) {
			cells = append(cells, cell{virtionet.DefaultWeightPkts, virtionet.DefaultTxYieldPkts})
		}
		runs := make([][]LatencyRow, len(cells))
		for run := 0; run < o.Runs; run++ {
			for i, c := range cells {
				row, err := seed002(c.weight, c.yield, o.LatencyRun, o.PingEvery)
				if err != nil {
					fail(fmt.Sprintf("seed 002 weight %s run %d", LatencyRowName(c.weight, c.yield), run+1), err)
					continue
				}
				runs[i] = append(runs[i], row)
			}
		}
		for i, c := range cells {
			m := medianLatency(c.weight, runs[i])
			m.Yield = c.yield
			r.Seed002 = append(r.Seed002, m)
		}
		printSeed002(o, r.Seed002)
	}
	if o.Only == "" || o.Only == "004" {
		type key struct {
			backend string
			batch   int
			mrg     bool
		}
		var keys []key
		for _, be := range []string{"tap", "af_packet"} {
			for _, mrg := range []bool{false, true} {
				for _, b := range []int{1, 64} {
					keys = append(keys, key{be, b, mrg})
				}
			}
		}
		runs := make([][]BatchRow, len(keys))
		for run := 0; run < o.Runs; run++ {
			for i, k := range keys {
				row, err := seed004(k.backend, k.batch, k.mrg, o.BatchRun)
				if err != nil {
					fail(fmt.Sprintf("seed 004 %s batch %d mrg %v run %d", k.backend, k.batch, k.mrg, run+1), err)
					continue
				}
				runs[i] = append(runs[i], row)
			}
		}
		for i, k := range keys {
			row := BatchRow{Backend: k.backend, Batch: k.batch, Mergeable: k.mrg}
			row.PPS = median(runs[i], func(b BatchRow) float64 { return b.PPS })
			row.FramesPerBatch = median(runs[i], func(b BatchRow) float64 { return b.FramesPerBatch })
			row.NsPerFrame = median(runs[i], func(b BatchRow) float64 { return b.NsPerFrame })
			row.NoBuffersPerS = median(runs[i], func(b BatchRow) float64 { return b.NoBuffersPerS })
			row.PPSRange = spread(runs[i], func(b BatchRow) float64 { return b.PPS })
			row.NsRange = spread(runs[i], func(b BatchRow) float64 { return b.NsPerFrame })
			for _, run := range runs[i] {
				for size, n := range run.Batches {
					if row.Batches == nil {
						row.Batches = map[string]uint64{}
					}
					row.Batches[size] += n
				}
			}
			r.Seed004 = append(r.Seed004, row)
		}
		printSeed004(o, r.Seed004)
	}
	if o.Only == "" || o.Only == "000" {
		runs := make([][]ThresholdRow, len(o.Thresholds))
		for run := 0; run < o.Runs; run++ {
			for i, thr := range o.Thresholds {
				row, err := seed000(thr, o.ThresholdRun)
				if err != nil {
					fail(fmt.Sprintf("seed 000 threshold %d run %d", thr, run+1), err)
					continue
				}
				runs[i] = append(runs[i], row)
			}
		}
		for i, thr := range o.Thresholds {
			r.Seed000 = append(r.Seed000, ThresholdRow{Threshold: thr,
				PPS:        median(runs[i], func(t ThresholdRow) float64 { return t.PPS }),
				NsPerFrame: median(runs[i], func(t ThresholdRow) float64 { return t.NsPerFrame }),
				PPSRange:   spread(runs[i], func(t ThresholdRow) float64 { return t.PPS }),
				NsRange:    spread(runs[i], func(t ThresholdRow) float64 { return t.NsPerFrame })})
		}
		printSeed000(o, r.Seed000)
	}
	if o.Only == "" || o.Only == "poll" {
		runs := make([][]PollRow, len(o.Polls))
		for run := 0; run < o.Runs; run++ {
			for i, us := range o.Polls {
				row, err := pollRun(us, o.PollRun)
				if err != nil {
					fail(fmt.Sprintf("tx poll %d us run %d", us, run+1), err)
					continue
				}
				runs[i] = append(runs[i], row)
			}
		}
		for i, us := range o.Polls {
			r.Poll = append(r.Poll, PollRow{PollUs: us,
				PPS:           median(runs[i], func(p PollRow) float64 { return p.PPS }),
				NsPerFrame:    median(runs[i], func(p PollRow) float64 { return p.NsPerFrame }),
				KicksPerFrame: median(runs[i], func(p PollRow) float64 { return p.KicksPerFrame })})
		}
		printPoll(o, r.Poll)
	}
	if o.Only == "" || o.Only == "backend" {
		runs := make([][]BackendRow, len(mechanisms))
		for run := 0; run < o.Runs; run++ {
			for i, m := range mechanisms {
				row, err := backendRun(m, o.BackendRun)
				if err != nil {
					fail(fmt.Sprintf("backend %s run %d", m, run+1), err)
					continue
				}
				runs[i] = append(runs[i], row)
			}
		}
		for i, m := range mechanisms {
			r.Backend = append(r.Backend, BackendRow{Mechanism: m,
				PPS:              median(runs[i], func(b BackendRow) float64 { return b.PPS }),
				FramesPerSyscall: median(runs[i], func(b BackendRow) float64 { return b.FramesPerSyscall }),
				NsPerFrame:       median(runs[i], func(b BackendRow) float64 { return b.NsPerFrame })})
		}
		printBackends(o, r.Backend)
		r.DevMech = runDevMechs(o, fail)
		printDevMechs(o, r.DevMech)
	}
	if o.Only == "" || o.Only == "mq" {
		type key struct {
			dir   string
			pairs int
		}
		var keys []key
		for _, dir := range []string{"tx", "rx"} {
			keys = append(keys, key{dir, 1}, key{dir, 2})
		}
		runs := make([][]MQRow, len(keys))
		for run := 0; run < o.Runs; run++ {
			for i, k := range keys {
				row, err := mqRun(k.dir, k.pairs, o.MQRun)
				if err != nil {
					fail(fmt.Sprintf("multiqueue %s %d pairs run %d", k.dir, k.pairs, run+1), err)
					continue
				}
				runs[i] = append(runs[i], row)
			}
		}
		for i, k := range keys {
			row := MQRow{Direction: k.dir, Pairs: k.pairs,
				PPS:        median(runs[i], func(r MQRow) float64 { return r.PPS }),
				NsPerFrame: median(runs[i], func(r MQRow) float64 { return r.NsPerFrame })}
			for p := range k.pairs {
				if k.pairs > 1 {
					row.PairPPS = append(row.PairPPS, median(runs[i], func(r MQRow) float64 {
						if p < len(r.PairPPS) {
							return r.PairPPS[p]
						}
						return 0
					}))
				}
			}
			r.MQ = append(r.MQ, row)
		}
		printMQ(o, r.MQ)
	}
	r.Seconds = time.Since(start).Seconds()
	fmt.Fprintf(o.Out, "\n%d failed runs; %.0f s in all\n", len(r.Failed), r.Seconds)
	if o.JSON != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(o.JSON, append(b, '\n'), 0o644); err != nil {
			return r, fmt.Errorf("cannot write %s: %v", o.JSON, err)
		}
		fmt.Fprintln(o.Out, "results:", o.JSON)
	}
	if o.Plot != "" {
		if err := plotResults(r, o.Plot); err != nil {
			return r, fmt.Errorf("cannot draw %s: %v", o.Plot, err)
		}
		fmt.Fprintln(o.Out, "plot:", o.Plot)
	}
	return r, nil
}

// median of f over rows; NaN-free: 0 for no rows.
func median[T any](rows []T, f func(T) float64) float64 {
	if len(rows) == 0 {
		return 0
	}
	v := make([]float64, len(rows))
	for i, r := range rows {
		v[i] = f(r)
	}
	return stats.Median(v)
}

func medianLatency(w int, rows []LatencyRow) LatencyRow {
	m := LatencyRow{Weight: w}
	m.MinMs = median(rows, func(r LatencyRow) float64 { return r.MinMs })
	m.AvgMs = median(rows, func(r LatencyRow) float64 { return r.AvgMs })
	m.MaxMs = median(rows, func(r LatencyRow) float64 { return r.MaxMs })
	m.P99Ms = median(rows, func(r LatencyRow) float64 { return r.P99Ms })
	m.TxPPS = median(rows, func(r LatencyRow) float64 { return r.TxPPS })
	m.AvgMsRange = spread(rows, func(r LatencyRow) float64 { return r.AvgMs })
	for _, r := range rows {
		m.Samples += r.Samples
		m.Lost += r.Lost
	}
	return m
}
