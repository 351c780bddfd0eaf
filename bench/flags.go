package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"tinyvmm/internal/intlist"
)

// MainE2E parses the flags of `tinyvmm bench e2e` and runs it; main.go
// calls it with the arguments after "bench e2e". The table goes to stdout,
// usage to stderr; --help is not an error.
func MainE2E(args []string, stdout, stderr io.Writer) error {
	o := DefaultOptions()
	o.Out = stdout
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.OutDir, "out", o.OutDir, "directory for e2e.json and the plots")
	fs.IntVar(&o.Runs, "runs", o.Runs, "runs per cell, interleaved between systems; each cell is their median")
	fs.IntVar(&o.Secs, "secs", o.Secs, "seconds per measurement")
	fs.DurationVar(&o.Budget, "budget", o.Budget, "start no new run after this long (the rest show as not run)")
	fs.StringVar(&o.ELF, "guest", o.ELF, "the bench guest ELF (guest/bench/build.sh)")
	fs.StringVar(&o.Tinyvmm, "tinyvmm", o.Tinyvmm, "the tinyvmm binary")
	fs.StringVar(&o.QEMU, "qemu", o.QEMU, "the QEMU binary")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "development: tinyvmm's Go CPU profile of its last tx run goes to `FILE`, of its last rx run to FILE.rx")
	kicks := fs.String("kicks", intlist.Format(o.Kicks), "seed 000 sweep: kick thresholds, comma-separated (empty: none)")
	weights := fs.String("weights", intlist.Format(o.Weights), "seed 002 sweep: tinyvmm --tx-weight-pkts values (0 = unlimited)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return fmt.Errorf("bench e2e: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench e2e: unexpected argument %q (see --help)", fs.Arg(0))
	}
	var err error
	if o.Kicks, err = intlist.Parse(*kicks); err != nil {
		return fmt.Errorf("bench e2e: --kicks: %w", err)
	}
	if o.Weights, err = intlist.Parse(*weights); err != nil {
		return fmt.Errorf("bench e2e: --weights: %w", err)
	}
	_, err = RunE2E(o)
	return err
}
