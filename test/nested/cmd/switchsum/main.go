// Command switchsum turns the context switches that bench/nested.sh
// NESTED_SWITCHES=1 records in L1 into a table: for each device thread
// (tinyvmm's net-IFNAME, vhost-PID), whose CPU time each of its turns on
// its CPU is made of, and how often it took the CPU from a running thread;
// with -window, each thread name's CPU, runs and switches in a stretch of
// the record (bench usernet's round trips, where L1 has one CPU).
//
//	go run ./test/nested/cmd/switchsum -data out/bench/nested-switches.data
//	perf script -i FILE $(go run ./test/nested/cmd/switchsum -script-args) | go run ./test/nested/cmd/switchsum
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"tinyvmm/test/nested"
)

func main() {
	gap := flag.Duration("gap", nested.DefaultTurnGap, "an idle stretch of the CPU longer than this ends a turn")
	data := flag.String("data", "", "read the switches from this perf.data `FILE` with the host's perf script (default: perf script's lines on stdin)")
	scriptArgs := flag.Bool("script-args", false, "print perf script's arguments that print the switches for this command, and exit")
	window := flag.String("window", "", "`FROM-TO` (perf's clock, s): instead of the turns, each thread name's CPU, runs and switches in that window")
	per := flag.Float64("per", 1, "with -window: the units the window holds (connections, pings); the figures are per unit")
	flag.Parse()
	if *scriptArgs {
		fmt.Println(nested.SwitchScriptArgs)
		return
	}
	var in io.Reader = os.Stdin
	var script *exec.Cmd
	var scriptErr bytes.Buffer
	if *data != "" {
		script = exec.Command("perf", append([]string{"script", "-i", *data}, strings.Fields(nested.SwitchScriptArgs)...)...)
		script.Stderr = &scriptErr
		out, err := script.StdoutPipe()
		if err == nil {
			err = script.Start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "switchsum: perf script:", err)
			os.Exit(1)
		}
		in = out
	}
	var err error
	if *window != "" {
		var from, to float64
		if _, serr := fmt.Sscanf(*window, "%g-%g", &from, &to); serr != nil || to <= from {
			fmt.Fprintf(os.Stderr, "switchsum: -window %q: want FROM-TO in seconds, FROM below TO\n", *window)
			os.Exit(2)
		}
		err = nested.SummarizeWindow(in, from, to, *per, os.Stdout)
	} else {
		err = nested.SummarizeSwitches(in, *gap, os.Stdout)
	}
	if script != nil {
		// perf script's rest, so that it exits; its failure, if any,
		// is the error to tell.
		io.Copy(io.Discard, in)
		if werr := script.Wait(); werr != nil {
			err = fmt.Errorf("perf script -i %s: %v: %s", *data, werr, strings.TrimSpace(scriptErr.String()))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "switchsum:", err)
		os.Exit(1)
	}
}
