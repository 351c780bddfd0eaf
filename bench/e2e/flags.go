package e2e

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"tinyvmm/internal/cliflag"
	"tinyvmm/internal/intlist"
)

// MainE2E parses the flags of `tinyvmm-lab bench e2e` and runs it; the lab command
// calls it with the arguments after "bench e2e". The table goes to stdout,
// --help too; a bad flag is a one-line cliflag.UsageError, returned before
// anything runs.
func MainE2E(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "lxguest" {
		// The Linux guest's side of the linux cells (lxguest.go), not for users.
		return MainLXGuest(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "switchecho" {
		// The other process of MeasureSwitchCost (switchcost.go), not for users.
		return MainSwitchEcho(args[1:])
	}
	o := DefaultOptions()
	o.Out = stdout
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	fs.StringVar(&o.OutDir, "out", o.OutDir, "directory for e2e.json and the plots")
	fs.IntVar(&o.Runs, "runs", o.Runs, "runs per cell, interleaved between systems; each cell is their median")
	fs.IntVar(&o.Secs, "secs", o.Secs, "seconds per measurement")
	fs.DurationVar(&o.Budget, "budget", o.Budget, "start no new run after this long (the rest show as not run)")
	fs.StringVar(&o.ELF, "guest", o.ELF, "the bench guest ELF (guest/bench/build.sh)")
	fs.StringVar(&o.Tinyvmm, "tinyvmm", o.Tinyvmm, "the tinyvmm binary")
	fs.StringVar(&o.QEMU, "qemu", o.QEMU, "the QEMU binary")
	fs.StringVar(&o.QEMUMachine, "qemu-machine", o.QEMUMachine, "QEMU's -M (the default has no PIT: the bench guest takes no interrupts)")
	fs.StringVar(&o.QEMUPreload, "qemu-preload", "", "LD_PRELOAD `FILE` into QEMU (bench/nested.sh: L1's no-io-uring.so)")
	fs.BoolVar(&o.Pin, "pin", o.Pin, "give each run's vCPU thread the last CPU to itself, the harness and the VMMs' other threads the rest, as a host tuned for VMs does (needs 2 CPUs)")
	fs.BoolVar(&o.PinApart, "pin-apart", o.PinApart, "with --pin, also give the harness (senders, sink, pinger) the first CPU to itself, apart from the VMMs' threads and vhost's (needs 3 CPUs)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "development: tinyvmm's Go CPU profile of its last tx run goes to `FILE`, of its last rx run to FILE.rx")
	kicks := fs.String("kicks", intlist.Format(o.Kicks), "seed 000 sweep: kick thresholds, comma-separated (empty: none)")
	fs.Func("variant", "also run tinyvmm with extra flags, interleaved: `NAME=FLAGS`, the flags apart by commas or spaces (like fast=--worker-batch,--poll-us=200; net:KEY=VALUE goes into the NIC's --net, like vec=net:io=writev; bin:PATH runs another tinyvmm build, like old=bin:/tmp/tinyvmm-old; repeatable)", func(v string) error {
		name, flags, ok := strings.Cut(v, "=")
		if !ok || name == "" || strings.TrimSpace(flags) == "" {
			return fmt.Errorf("want NAME=FLAGS, like batch=--worker-batch")
		}
		args := strings.FieldsFunc(flags, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
		o.Variants = append(o.Variants, Variant{Name: name, Args: args})
		return nil
	})
	polls := fs.String("polls", intlist.Format(o.Polls), "tx poll sweep: tinyvmm --poll-us values for a 64 B tx flood (0 = off; empty: none)")
	only := fs.String("only", "", "run only these cells, comma-separated keys as in e2e.json (like rx64,ping_idle; empty: all)")
	weights := fs.String("weights", intlist.Format(o.Weights), "seed 002 sweep: tinyvmm --tx-weight-pkts values (0 = unlimited)")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench e2e", "Usage: tinyvmm-lab bench e2e [flags]", args, stdout); help || err != nil {
		return err
	}
	if o.PinApart && !o.Pin {
		return cliflag.Usagef("bench e2e: --pin-apart goes with --pin")
	}
	if o.Runs < 1 || o.Secs < 1 {
		return cliflag.Usagef("bench e2e: --runs %d --secs %d: give at least 1 of each", o.Runs, o.Secs)
	}
	var err error
	if o.Kicks, err = intlist.Parse(*kicks); err != nil {
		return cliflag.Usagef("bench e2e: --kicks: %v", err)
	}
	if o.Weights, err = intlist.Parse(*weights); err != nil {
		return cliflag.Usagef("bench e2e: --weights: %v", err)
	}
	if o.Polls, err = intlist.Parse(*polls); err != nil {
		return cliflag.Usagef("bench e2e: --polls: %v", err)
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if _, err := o.cells(nil); err != nil {
		return cliflag.Usagef("%v", err)
	}
	_, err = RunE2E(o)
	return err
}
