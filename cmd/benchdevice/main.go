// Command benchdevice runs virtionet's device-level benchmark: the three
// seed experiments on tinyvmm's own device, with the Go virtio driver as
// the guest and a tap inside a network namespace that it creates (root).
//
//	go run ./cmd/benchdevice [-runs 3] [-only 002|004|000|backend] [-json F] [-plot F.png]
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"tinyvmm/virtionet/bench"
)

func main() {
	var o bench.Options
	flag.IntVar(&o.Runs, "runs", 3, "runs per cell; the median is shown")
	flag.StringVar(&o.Only, "only", "", "run one table: 002 (weight vs latency), 004 (rx batch), 000 (notify threshold) or backend")
	flag.StringVar(&o.JSON, "json", "bench-device.json", "write the results as JSON here (empty: don't)")
	flag.StringVar(&o.Plot, "plot", "bench-device.png", "draw the results into this PNG (empty: don't)")
	weights := flag.String("weights", "0,64,128,256,512,1024,2048,4096", "seed 002 tx packet weights (0: unlimited)")
	thresholds := flag.String("thresholds", "1-64", "seed 000 notify thresholds: a list or a range")
	flag.DurationVar(&o.LatencyRun, "latency-time", time.Second, "seed 002 time per run")
	flag.DurationVar(&o.BatchRun, "batch-time", time.Second, "seed 004 time per run")
	flag.DurationVar(&o.ThresholdRun, "threshold-time", 200*time.Millisecond, "seed 000 time per run")
	flag.DurationVar(&o.BackendRun, "backend-time", 500*time.Millisecond, "backend mechanism time per run")
	flag.Parse()
	var err error
	if o.Weights, err = parseInts(*weights); err != nil {
		fail(fmt.Errorf("-weights: %v", err))
	}
	if o.Thresholds, err = parseInts(*thresholds); err != nil {
		fail(fmt.Errorf("-thresholds: %v", err))
	}
	if o.Only != "" && o.Only != "002" && o.Only != "004" && o.Only != "000" && o.Only != "backend" {
		fail(fmt.Errorf("-only %q: use 002, 004, 000 or backend", o.Only))
	}
	r, err := bench.Run(o)
	if err != nil {
		fail(err)
	}
	if len(r.Failed) > 0 {
		os.Exit(1)
	}
}

// parseInts reads "1,2,8" or "1-64".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a number", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range", part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchdevice:", err)
	os.Exit(2)
}
