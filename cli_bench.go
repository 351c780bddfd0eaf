package main

import (
	"fmt"
	"io"

	"tinyvmm/bench/device"
	"tinyvmm/internal/cliflag"
)

func init() {
	commands["bench"] = command{"the seed experiments on the net device: bench device (root)", benchMain}
}

// labBenches are the comparison harnesses, which live in the lab command
// (cmd/tinyvmm-lab) so that tinyvmm does not link them.
var labBenches = map[string]bool{"e2e": true, "boot": true, "share": true, "usernet": true}

// benchMain runs bench device, which owns its flags.
func benchMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		fmt.Fprintln(w, "Usage: tinyvmm bench device [flags]")
		fmt.Fprintln(w, "\nWeight, rx batch and notify sweeps on the net device, a Go driver as the")
		fmt.Fprintln(w, "guest ('tinyvmm bench device --help' for its flags). The comparisons with")
		fmt.Fprintln(w, "QEMU and the host (e2e, boot, share, usernet) are in the lab command:")
		fmt.Fprintln(w, "tinyvmm-lab bench --help.")
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	if args[0] != "device" {
		if labBenches[args[0]] {
			return fail(stderr, exitUsage, fmt.Errorf("bench %s is in the lab command: tinyvmm-lab bench %s (make build puts it in bin/)", args[0], args[0]))
		}
		return fail(stderr, exitUsage, fmt.Errorf("unknown benchmark %q; tinyvmm has bench device", args[0]))
	}
	err := device.MainDevice(args[1:], stdout, stderr)
	if cliflag.IsUsage(err) {
		return fail(stderr, exitUsage, err)
	}
	if err != nil {
		return fail(stderr, exitRuntime, err)
	}
	return 0
}
