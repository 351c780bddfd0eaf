// Command perfsum turns the perf report that `nested -perf` prints in L1
// (bench/nested.sh NESTED_PERF=1) into a table: each thread name's share
// of the samples and the top symbols, kernel addresses named from the L1
// kernel's vmlinux, which L1 itself cannot do (no kallsyms).
//
//	go run ./test/nested/cmd/perfsum -vmlinux out/guest/vmlinux <report >table
package main

import (
	"flag"
	"fmt"
	"os"

	"tinyvmm/test/nested"
)

func main() {
	vmlinux := flag.String("vmlinux", "out/guest/vmlinux", "the L1 kernel's uncompressed image, with its symbols")
	top := flag.Int("top", 60, "symbols to list")
	flag.Parse()
	ks, err := nested.ReadKernelSymbols(*vmlinux)
	if err == nil {
		err = nested.SummarizePerf(os.Stdin, ks, *top, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfsum:", err)
		os.Exit(1)
	}
}
