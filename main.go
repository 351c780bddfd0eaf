// Command tinyvmm is a minimal KVM virtual machine monitor with its own
// vhost-style virtio-net device. `tinyvmm run` boots a Linux guest.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand: it gets its arguments and returns the exit
// status. Other files of package main may add entries from init.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"run": {"boot a guest: tinyvmm run [flags] [-- CMD ARGS...]", runMain},
}

// Exit statuses of tinyvmm itself (a guest's own status passes through).
const (
	exitRuntime = 1
	exitUsage   = 2
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "tinyvmm: unknown command %q; see tinyvmm --help\n", args[0])
		return exitUsage
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "tinyvmm: a minimal KVM virtual machine monitor with its own virtio-net device")
	fmt.Fprintln(w, "\nUsage: tinyvmm COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'tinyvmm COMMAND --help' for a command's flags.")
}

// fail prints the one-line error tinyvmm gives for every bad input.
func fail(stderr io.Writer, status int, err error) int {
	msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", " "), "tinyvmm: ")
	fmt.Fprintf(stderr, "tinyvmm: %s\n", msg)
	return status
}
