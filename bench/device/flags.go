package device

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"tinyvmm/internal/cliflag"
	"tinyvmm/internal/intlist"
)

// MainDevice parses the flags of `tinyvmm bench device` and runs it;
// cli_bench.go calls it with the arguments after "bench
// device". Tables go to stdout, --help too; a bad flag is a one-line
// cliflag.UsageError, returned before anything runs. Failed runs are shown
// in the output and make it return an error.
func MainDevice(args []string, stdout, stderr io.Writer) error {
	var o Options
	o.Out = stdout
	fs := flag.NewFlagSet("bench device", flag.ContinueOnError)
	fs.IntVar(&o.Runs, "runs", 3, "runs per cell, interleaved across rows; each cell is their median")
	fs.StringVar(&o.Only, "only", "", "run one table: 002 (weight vs latency), 004 (rx batch), 000 (notify threshold), poll (tx poll mode), backend or mq (1 vs 2 queue pairs)")
	fs.StringVar(&o.JSON, "json", "bench-device.json", "write the results as JSON here (empty: don't)")
	fs.StringVar(&o.Plot, "plot", "bench-device.svg", "draw the results into this SVG file (empty: don't)")
	weights := fs.String("weights", "0,64,128,256,512,1024,2048,4096", "seed 002 tx packet weights (0: unlimited)")
	thresholds := fs.String("thresholds", "1-64", "seed 000 notify thresholds: a list, ranges allowed (1-8,16)")
	fs.DurationVar(&o.LatencyRun, "latency-time", time.Second, "seed 002 time per run")
	fs.DurationVar(&o.BatchRun, "batch-time", time.Second, "seed 004 time per run")
	fs.DurationVar(&o.ThresholdRun, "threshold-time", 200*time.Millisecond, "seed 000 time per run")
	fs.DurationVar(&o.BackendRun, "backend-time", 500*time.Millisecond, "backend mechanism time per run")
	fs.DurationVar(&o.MQRun, "mq-time", time.Second, "multiqueue time per run")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench device", "Usage: tinyvmm bench device [flags]", args, stdout); help || err != nil {
		return err
	}
	if o.Runs < 1 {
		return cliflag.Usagef("bench device: --runs %d: give at least 1", o.Runs)
	}
	var err error
	if o.Weights, err = intlist.Parse(*weights); err == nil && len(o.Weights) == 0 {
		err = errors.New("no values")
	}
	if err != nil {
		return cliflag.Usagef("bench device: --weights: %v", err)
	}
	if o.Thresholds, err = intlist.Parse(*thresholds); err == nil && len(o.Thresholds) == 0 {
		err = errors.New("no values")
	}
	if err != nil {
		return cliflag.Usagef("bench device: --thresholds: %v", err)
	}
	switch o.Only {
	case "", "002", "004", "000", "poll", "backend", "mq":
	default:
		return cliflag.Usagef("bench device: --only %q: use 002, 004, 000, poll, backend or mq", o.Only)
	}
	r, err := Run(o)
	if err != nil {
		return fmt.Errorf("bench device: %w", err)
	}
	if len(r.Failed) > 0 {
		return fmt.Errorf("bench device: %d runs failed (shown above)", len(r.Failed))
	}
	return nil
}
