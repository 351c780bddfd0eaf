// Command benchdevice runs virtionet's device-level benchmark (the same as
// `tinyvmm bench device`): the seed experiments on tinyvmm's own device,
// with the Go virtio driver as the guest and a tap inside a network
// namespace that it creates (needs root).
//
//	go run ./cmd/benchdevice [--runs 3] [--only 002|004|000|backend] [--json F] [--plot F.png]
package main

import (
	"fmt"
	"os"

	"tinyvmm/virtionet/bench"
)

func main() {
	if err := bench.MainDevice(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
