package main

import (
	"fmt"
	"io"

	bootbench "tinyvmm/bench/boot"
	"tinyvmm/bench/device"
	"tinyvmm/bench/e2e"
	sharebench "tinyvmm/bench/share"
	usernetbench "tinyvmm/bench/usernet"
	"tinyvmm/internal/cliflag"
)

func init() {
	commands["bench"] = command{"run a benchmark: tinyvmm bench device|e2e|boot|share|usernet [flags] (as root)", benchMain}
}

// benchMain dispatches to the benchmarks, which own their flags.
func benchMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		fmt.Fprintln(w, "Usage: tinyvmm bench device [flags]   weight, rx batch and notify sweeps on the net device, a Go driver as the guest")
		fmt.Fprintln(w, "       tinyvmm bench e2e [flags]      the bench guest under tinyvmm, the no-VM ceiling and QEMU")
		fmt.Fprintln(w, "       tinyvmm bench boot [flags]     boot time to /init and to exit: tinyvmm vs QEMU microvm vs QEMU q35")
		fmt.Fprintln(w, "       tinyvmm bench share [flags]    read throughput of a --share file in the guest vs the same read on the host")
		fmt.Fprintln(w, "       tinyvmm bench usernet [flags]  --net user vs QEMU's -netdev user: bulk TCP both ways, round trips, DNS")
		fmt.Fprintln(w, "Run 'tinyvmm bench NAME --help' for their flags.")
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	var err error
	switch args[0] {
	case "device":
		err = device.MainDevice(args[1:], stdout, stderr)
	case "e2e":
		err = e2e.MainE2E(args[1:], stdout, stderr)
	case "boot":
		err = bootbench.MainBoot(args[1:], stdout, stderr)
	case "share":
		err = sharebench.MainShare(args[1:], stdout, stderr)
	case "usernet":
		err = usernetbench.MainUsernet(args[1:], stdout, stderr)
	default:
		return fail(stderr, exitUsage, fmt.Errorf("unknown benchmark %q; use device, e2e, boot, share or usernet", args[0]))
	}
	if cliflag.IsUsage(err) {
		return fail(stderr, exitUsage, err)
	}
	if err != nil {
		return fail(stderr, exitRuntime, err)
	}
	return 0
}
