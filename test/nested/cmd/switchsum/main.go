// Command switchsum turns the context switches that bench/nested.sh
// NESTED_SWITCHES=1 records in L1 into a table: for each device thread
// (tinyvmm's net-IFNAME, vhost-PID), whose CPU time each of its turns on
// its CPU is made of, and how often it took the CPU from a running thread;
// with -window, each thread name's CPU, runs and switches in a stretch of
// the record (bench usernet's round trips, where L1 has one CPU).
//
//	perf script -i out/bench/nested-switches.data $(go run ./test/nested/cmd/switchsum -script-args) |
//		go run ./test/nested/cmd/switchsum
package main

import (
	"flag"
	"fmt"
	"os"

	"tinyvmm/test/nested"
)

func main() {
	gap := flag.Duration("gap", nested.DefaultTurnGap, "an idle stretch of the CPU longer than this ends a turn")
	recordArgs := flag.Bool("record-args", false, "print perf record's arguments that make the record, and exit")
	scriptArgs := flag.Bool("script-args", false, "print perf script's arguments that print it for this command, and exit")
	window := flag.String("window", "", "`FROM-TO` (perf's clock, s): instead of the turns, each thread name's CPU, runs and switches in that window")
	per := flag.Float64("per", 1, "with -window: the units the window holds (connections, pings); the figures are per unit")
	flag.Parse()
	switch {
	case *recordArgs:
		fmt.Println(nested.SwitchRecordArgs)
		return
	case *scriptArgs:
		fmt.Println(nested.SwitchScriptArgs)
		return
	}
	var err error
	if *window != "" {
		var from, to float64
		if _, serr := fmt.Sscanf(*window, "%g-%g", &from, &to); serr != nil || to <= from {
			fmt.Fprintf(os.Stderr, "switchsum: -window %q: want FROM-TO in seconds, FROM below TO\n", *window)
			os.Exit(2)
		}
		err = nested.SummarizeWindow(os.Stdin, from, to, *per, os.Stdout)
	} else {
		err = nested.SummarizeSwitches(os.Stdin, *gap, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "switchsum:", err)
		os.Exit(1)
	}
}
