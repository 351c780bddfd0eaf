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
	"strings"
	"syscall"
	"time"

	"tinyvmm/internal/cliflag"
	"tinyvmm/kvm"
	"tinyvmm/tour"
)

func init() {
	commands["tour"] = command{"boot the default guest, ping the host, and tell that packet's story", tourMain}
}

const tourUsage = `Usage: tinyvmm tour [--kernel PATH] [--initrd PATH] [--html FILE] [--seeds=false]

Boots the default guest with a NIC on a tap in a network namespace of its
own (removed afterwards), has it ping the host once, and tells the story of
that packet, both ways, from the device's trace of the run: each step with
its file and function, the counter it moves and the time it took. Then one
screen for each of three ideas from Linux's vhost-net (tx weights, rx
batching, the notification threshold), each with a live run of a few
seconds of 'tinyvmm bench device' (no VM; namespaces of its own).
--html FILE also writes it all as one self-contained page, with plots.
Needs root. Without a usable /dev/kvm it boots the guest on nested KVM
inside QEMU through the lab command beside it (tinyvmm-lab nested, which
builds L1 from a tinyvmm checkout: Go and 'make guest'); the live runs then
still run here.
`

func tourMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tour", flag.ContinueOnError)
	kernel := fs.String("kernel", "", "guest kernel (default: out/guest/vmlinux)")
	initrd := fs.String("initrd", "", "initramfs (default: out/guest/initramfs.cpio)")
	htmlFile := fs.String("html", "", "also write the tour as one self-contained HTML page to FILE")
	seeds := fs.Bool("seeds", true, "after the packet, the three ideas with their live runs (about 10 s)")
	emitData := fs.Bool("emit-data", false, "also print the run's trace and counters as data lines (how the nested run hands them over)")
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
	// The page's file is made first, so a bad path fails before the boot.
	var page *os.File
	if *htmlFile != "" {
		f, err := os.Create(*htmlFile)
		if err != nil {
			return fail(stderr, exitRuntime, fmt.Errorf("tour: %v", err))
		}
		page = f
		defer func() {
			if page != nil { // not written: leave no empty page behind
				page.Close()
				os.Remove(*htmlFile)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var res tour.Result
	var err error
	nested := false
	if h := kvm.Detect(); !h.Usable || h.PVM {
		why := h.Why
		if h.Usable {
			why = "host KVM is PVM, whose guests cannot run user space"
		}
		res, err = tourNested(ctx, why, stderr)
		nested = true
	} else {
		res, err = tourHere(ctx, *kernel, *initrd, stderr)
	}
	if err != nil {
		return fail(stderr, exitRuntime, fmt.Errorf("tour: %v", err))
	}
	story, err := tour.Tell(res.Events, res.Stats)
	if err != nil {
		return fail(stderr, exitRuntime, fmt.Errorf("tour: %v", err))
	}
	p := tour.Page{Run: res, Story: story, Nested: nested}
	tour.WriteStory(stdout, p)
	if *seeds {
		s, err := tour.RunSeeds(tour.SeedOptions{Log: stderr})
		if err != nil {
			return fail(stderr, exitRuntime, fmt.Errorf("tour: the live runs: %v", err))
		}
		p.Seeds = &s
		tour.RenderSeeds(stdout, s)
	}
	if *emitData {
		if err := tour.WriteData(stdout, res); err != nil {
			return fail(stderr, exitRuntime, fmt.Errorf("tour: %v", err))
		}
	}
	if page != nil {
		err := tour.WriteHTML(page, p)
		if cerr := page.Close(); err == nil {
			err = cerr
		}
		page = nil
		if err != nil {
			os.Remove(*htmlFile)
			return fail(stderr, exitRuntime, fmt.Errorf("tour: %s: %v", *htmlFile, err))
		}
		fmt.Fprintf(stdout, "\nThe same tour as one page: %s\n", *htmlFile)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, tour.End)
	return 0
}

// tourHere boots the guest on this machine's KVM.
func tourHere(ctx context.Context, kernel, initrd string, stderr io.Writer) (tour.Result, error) {
	dirs := guestDirs()
	if kernel == "" {
		if kernel = findGuestFile(dirs, defaultKernel); kernel == "" {
			return tour.Result{}, fmt.Errorf("no default kernel (out/guest/%s); build the default guest with 'make guest'", defaultKernel)
		}
	}
	if initrd == "" {
		if initrd = findGuestFile(dirs, defaultInitrd); initrd == "" {
			return tour.Result{}, fmt.Errorf("no default initrd (out/guest/%s); build the default guest with 'make guest'", defaultInitrd)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return tour.Run(ctx, tour.Options{Kernel: kernel, Initrd: initrd, Log: stderr})
}

// labCommand is the lab's binary, which tinyvmm looks for beside itself
// (make build puts both in bin/).
const labCommand = "tinyvmm-lab"

// tourNested runs `tinyvmm tour` inside the nested L1, where KVM is real,
// through the lab's nested runner (tinyvmm-lab nested, which builds L1
// from the repository), and takes the run's trace and counters from L1's
// console; the story is told here, from them. Without the lab beside this
// binary it says how to get it.
func tourNested(ctx context.Context, why string, stderr io.Writer) (tour.Result, error) {
	guestArgs := []string{"-probe-exits", "0", "--", "tour", "--seeds=false", "--emit-data"}
	lab := ""
	if exe, err := os.Executable(); err == nil {
		lab = filepath.Join(filepath.Dir(exe), labCommand)
	}
	if _, err := os.Stat(lab); lab == "" || err != nil {
		return tour.Result{}, fmt.Errorf("%s; the tour then boots its guest on nested KVM inside QEMU through the lab command, "+
			"%s, beside tinyvmm, which builds that from a tinyvmm checkout: there, 'make build guest' and run bin/tinyvmm tour",
			why, labCommand)
	}
	fmt.Fprintf(stderr, "tour: %s; booting the guest on nested KVM inside QEMU (%s nested: 1-3 minutes)\n", why, labCommand)
	cmd := exec.CommandContext(ctx, lab, append([]string{"nested"}, guestArgs...)...)
	var runnerLog strings.Builder
	cmd.Stderr = &runnerLog
	out, err := cmd.StdoutPipe()
	if err != nil {
		return tour.Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return tour.Result{}, err
	}
	var console []string // kept for the error path
	var data tour.DataReader
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); !data.Line(line) {
			console = append(console, strings.TrimRight(line, "\r"))
		}
	}
	err = cmd.Wait()
	res, derr := data.Result()
	if err == nil && derr == nil {
		return res, nil
	}
	if len(console) > 30 {
		console = console[len(console)-30:]
	}
	fmt.Fprintf(stderr, "%s\n%s\n", strings.Join(console, "\n"), lastLines(runnerLog.String(), 10))
	if err == nil {
		err = derr
	}
	return res, fmt.Errorf("the nested run did not hand over its trace (%v)", err)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
