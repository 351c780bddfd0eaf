package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"tinyvmm/internal/cliflag"
	"tinyvmm/kvm"
	"tinyvmm/tour"
)

func init() {
	commands["tour"] = command{"boot the default guest, ping the host once, and tell that packet's story", tourMain}
}

const tourUsage = `Usage: tinyvmm tour [--kernel PATH] [--initrd PATH]

Boots the default guest with a NIC on a tap in a network namespace of its
own (removed afterwards), has it ping the host once, and tells the story of
that packet, both ways, from the device's trace of the run: each step with
its file and function, the counter it moves and the time it took. Needs
root. Without a usable /dev/kvm it runs itself on nested KVM inside QEMU
(test/nested), which needs the repository, Go and 'make guest'.
`

// The first and last lines of the story: the nested proxy keeps what lies
// between them in L1's console.
const (
	tourBegin = "tinyvmm tour: one ping from the guest (10.0.2.15) to the host (10.0.2.1)"
	tourEnd   = "End of the tour. GUIDE.md explains each stage, with the files to read."
)

func tourMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tour", flag.ContinueOnError)
	kernel := fs.String("kernel", "", "guest kernel (default: out/guest/vmlinux)")
	initrd := fs.String("initrd", "", "initramfs (default: out/guest/initramfs.cpio)")
	if err := cliflag.Parse(fs, "tour", args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, tourUsage)
			return 0
		}
		return fail(stderr, exitUsage, err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, exitUsage, fmt.Errorf("tour: unexpected argument %q", fs.Arg(0)))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if h := kvm.Detect(); !h.Usable || h.PVM {
		why := h.Why
		if h.Usable {
			why = "host KVM is PVM, whose guests cannot run user space"
		}
		return tourNested(ctx, why, stdout, stderr)
	}
	dirs := guestDirs()
	if *kernel == "" {
		if *kernel = findGuestFile(dirs, defaultKernel); *kernel == "" {
			return fail(stderr, exitRuntime, fmt.Errorf("no default kernel (out/guest/%s); build the default guest with 'make guest'", defaultKernel))
		}
	}
	if *initrd == "" {
		if *initrd = findGuestFile(dirs, defaultInitrd); *initrd == "" {
			return fail(stderr, exitRuntime, fmt.Errorf("no default initrd (out/guest/%s); build the default guest with 'make guest'", defaultInitrd))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	res, err := tour.Run(ctx, tour.Options{Kernel: *kernel, Initrd: *initrd, Log: stderr})
	if err != nil {
		return fail(stderr, exitRuntime, fmt.Errorf("tour: %v", err))
	}
	story, err := tour.Tell(res.Events, res.Stats)
	if err != nil {
		return fail(stderr, exitRuntime, fmt.Errorf("tour: %v", err))
	}
	fmt.Fprintln(stdout, tourBegin)
	fmt.Fprintln(stdout, "and back, told from the device's trace of this very run.")
	fmt.Fprintln(stdout)
	for _, l := range res.Ping {
		fmt.Fprintf(stdout, "  guest$ %s\n", strings.TrimSpace(l))
	}
	fmt.Fprintf(stdout, "  (boot, ping and power-off took %.1f s; the device moved tx frames with %s)\n",
		res.Elapsed.Seconds(), res.Stats.IO)
	tour.Render(stdout, story)
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, tourEnd)
	return 0
}

// consoleNoise is a kernel log line of L1 ("[   5.86] kvm [49]: ...").
var consoleNoise = regexp.MustCompile(`^\[\s*\d+\.\d+\] `)

// tourNested runs `tinyvmm tour` inside the nested L1 (test/nested), where
// KVM is real, and prints the story from L1's console.
func tourNested(ctx context.Context, why string, stdout, stderr io.Writer) int {
	root := findRepo()
	if root == "" {
		return fail(stderr, exitRuntime, fmt.Errorf("tour: %s, and no tinyvmm repository here to run it on nested KVM from (run tinyvmm tour in the repository)", why))
	}
	if _, err := exec.LookPath("go"); err != nil {
		return fail(stderr, exitRuntime, fmt.Errorf("tour: %s, and no Go toolchain to build the nested runner", why))
	}
	fmt.Fprintf(stderr, "tour: %s; running the tour on nested KVM inside QEMU (test/nested: 1-3 minutes)\n", why)
	cmd := exec.CommandContext(ctx, "go", "run", "./test/nested/cmd/nested", "-probe-exits", "0", "--", "tour")
	cmd.Dir = root
	var runnerLog strings.Builder
	cmd.Stderr = &runnerLog
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fail(stderr, exitRuntime, err)
	}
	if err := cmd.Start(); err != nil {
		return fail(stderr, exitRuntime, err)
	}
	var console []string // kept for the error path
	in, done := false, false
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		console = append(console, line)
		switch {
		case strings.HasPrefix(line, tourBegin):
			in = true
		case !in || done || consoleNoise.MatchString(line):
			continue
		}
		if line == tourEnd {
			fmt.Fprintln(stdout, "(This run was in the nested L1, which QEMU emulates: its times are far above")
			fmt.Fprintln(stdout, "hardware's. The steps, their order and the counters carry over.)")
			fmt.Fprintln(stdout)
			done = true
		}
		fmt.Fprintln(stdout, line)
	}
	err = cmd.Wait()
	if err != nil || !done {
		if len(console) > 30 {
			console = console[len(console)-30:]
		}
		fmt.Fprintf(stderr, "%s\n%s\n", strings.Join(console, "\n"), lastLines(runnerLog.String(), 10))
		return fail(stderr, exitRuntime, fmt.Errorf("tour: the nested run did not tell the story (%v)", err))
	}
	return 0
}

// findRepo returns the tinyvmm repository holding the current directory or
// the binary, or "".
func findRepo() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, "test", "nested", "cmd", "nested")); err == nil {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
