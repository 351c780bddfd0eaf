// Command tinyvmm-lab is tinyvmm's lab: the benchmarks that compare tinyvmm
// with QEMU and with the host (bench e2e, boot, share, usernet) and the
// nested runner, which boots a Linux with real KVM inside QEMU for hosts
// without a usable /dev/kvm. It is a command of its own so that the
// product, tinyvmm, links none of it; the benchmarks run the tinyvmm
// binary beside it (make build puts both in bin/).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	bootbench "tinyvmm/bench/boot"
	"tinyvmm/bench/e2e"
	sharebench "tinyvmm/bench/share"
	usernetbench "tinyvmm/bench/usernet"
	"tinyvmm/internal/cliflag"
)

// Exit statuses, as tinyvmm's.
const (
	exitRuntime = 1
	exitUsage   = 2
)

const usage = `tinyvmm-lab: tinyvmm's benchmarks against QEMU and the host, and the
nested runner

Usage: tinyvmm-lab bench e2e [flags]
           the bench guest under tinyvmm, the no-VM ceiling and QEMU
       tinyvmm-lab bench boot [flags]
           boot time to /init and to exit: tinyvmm, QEMU microvm, QEMU q35
       tinyvmm-lab bench share [flags]
           reads of a --share file in the guest against the same on the host
       tinyvmm-lab bench usernet [flags]
           guest->host TCP over --net user against the host's loopback
       tinyvmm-lab nested [flags] [-- COMMAND LINE]
           tests and a tinyvmm (with -lab, tinyvmm-lab) command line on real
           KVM inside QEMU, for hosts without a usable /dev/kvm

'tinyvmm-lab bench NAME --help' and 'tinyvmm-lab nested --help' list their
flags. The benchmarks run as root, with the tinyvmm binary beside this one.
`

func main() {
	cliflag.Prog = "tinyvmm-lab"
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "bench":
		return benchMain(args[1:], stdout, stderr)
	case "nested":
		return nestedMain(args[1:], stdout, stderr)
	}
	return fail(stderr, exitUsage, fmt.Errorf("unknown command %q; see tinyvmm-lab --help", args[0]))
}

func benchMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprint(stderr, usage)
			return exitUsage
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	var err error
	switch args[0] {
	case "e2e":
		err = e2e.MainE2E(args[1:], stdout, stderr)
	case "boot":
		err = bootbench.MainBoot(args[1:], stdout, stderr)
	case "share":
		err = sharebench.MainShare(args[1:], stdout, stderr)
	case "usernet":
		err = usernetbench.MainUsernet(args[1:], stdout, stderr)
	case "device":
		return fail(stderr, exitUsage, fmt.Errorf("bench device is in tinyvmm itself: tinyvmm bench device"))
	default:
		return fail(stderr, exitUsage, fmt.Errorf("unknown benchmark %q; use e2e, boot, share or usernet", args[0]))
	}
	if cliflag.IsUsage(err) {
		return fail(stderr, exitUsage, err)
	}
	if err != nil {
		return fail(stderr, exitRuntime, err)
	}
	return 0
}

// fail prints the one-line error the lab gives for every bad input.
func fail(stderr io.Writer, status int, err error) int {
	msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", " "), "tinyvmm-lab: ")
	fmt.Fprintf(stderr, "tinyvmm-lab: %s\n", msg)
	return status
}
