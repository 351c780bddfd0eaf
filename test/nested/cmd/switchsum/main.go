// Command switchsum turns the context switches that bench/nested.sh
// NESTED_SWITCHES=1 records in L1 into a table: for each device thread
// (tinyvmm's net-IFNAME, vhost-PID), whose CPU time each of its turns on
// its CPU is made of, and how often it took the CPU from a running thread.
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
	flag.Parse()
	switch {
	case *recordArgs:
		fmt.Println(nested.SwitchRecordArgs)
		return
	case *scriptArgs:
		fmt.Println(nested.SwitchScriptArgs)
		return
	}
	if err := nested.SummarizeSwitches(os.Stdin, *gap, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "switchsum:", err)
		os.Exit(1)
	}
}
