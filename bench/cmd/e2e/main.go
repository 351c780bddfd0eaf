// Command e2e runs the end-to-end benchmark (what `tinyvmm bench e2e`
// runs): go run ./bench/cmd/e2e [flags], as root, from the repository root.
package main

import (
	"fmt"
	"os"

	"tinyvmm/bench"
)

func main() {
	if err := bench.MainE2E(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
