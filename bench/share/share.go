// Package share is `tinyvmm-lab bench share`: a --share (virtio-fs) measured
// in the guest against the same operations on the host, and, where QEMU
// can serve one, against QEMU's own virtio-9p share in the same place.
//
// Three operations, each timed --runs times (the median is reported):
//
//   - read: one sequential read of a --size MiB file, 1 MiB at a time;
//   - walk: a walk of a tree of --files files (100 per directory) with an
//     lstat of every entry, what `find | xargs stat` or `git status` do;
//   - parallel: 4 readers of their own 16 MiB file at once against 1. In
//     a guest each cell first drops the guest's cached pages of the files
//     (POSIX_FADV_DONTNEED), so the readers go through the share and not
//     the guest's page cache, whatever the cache policy.
//
// The guest side is this binary itself, copied into the share and run
// there with --measure, so nothing but the file system differs. The
// report's top-level keys are the share as the README's CI recipes run
// it (--share-cache=always, what --root uses): read_ratio (the guest's
// MiB/s over the host's), walk_ratio (the guest's seconds over the
// host's) and parallel_speedup (the guest's 4 readers' MiB/s over 1
// reader's). Beside them: host_parallel_speedup, the host's own 4 readers
// over 1 in the same run (what the machine's CPUs allow), and the default
// --share-cache=auto's three ratios as auto_read_ratio, auto_walk_ratio
// and auto_parallel_speedup.
package share

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/bench/tinyvmmbin"
	"tinyvmm/internal/cliflag"
	"tinyvmm/internal/stats"
	"tinyvmm/sharefs"
)

const (
	// guestTimeout bounds one VM's side (a guest that hangs).
	guestTimeout = 25 * time.Minute

	readChunk   = 1 << 20
	parReaders  = 4
	parFileSize = 16 << 20
	perDir      = 100
)

// Runs is one side's timings, one value per run.
type Runs struct {
	ReadMiBs []float64 `json:"read_mib_s"`
	WalkSecs []float64 `json:"walk_s"`
	Par1MiBs []float64 `json:"parallel1_mib_s"`
	Par4MiBs []float64 `json:"parallel4_mib_s"`
	// Par1Busy and Par4Busy: the CPUs busy during each parallel cell
	// where it ran (from /proc/stat: busy time over wall time, so 4.0
	// is 4 CPUs kept busy); CPUs: how many it had. Busy CPUs near CPUs
	// mean the readers were bound by the CPU; far below, by waits.
	Par1Busy []float64 `json:"parallel1_busy_cpus,omitempty"`
	Par4Busy []float64 `json:"parallel4_busy_cpus,omitempty"`
	CPUs     int       `json:"cpus,omitempty"`
	Entries  int       `json:"walk_entries"`
}

// Side is one side's medians and its runs.
type Side struct {
	Where    string  `json:"where"`
	ReadMiBs float64 `json:"read_mib_s"`
	WalkSecs float64 `json:"walk_s"`
	Par1MiBs float64 `json:"parallel1_mib_s"`
	Par4MiBs float64 `json:"parallel4_mib_s"`
	Speedup  float64 `json:"parallel_speedup"`
	Par1Busy float64 `json:"parallel1_busy_cpus,omitempty"`
	Par4Busy float64 `json:"parallel4_busy_cpus,omitempty"`
	Runs     Runs    `json:"runs"`
	FUSE     *FUSE   `json:"fuse,omitempty"`
}

// Report is out/bench/share.json.
type Report struct {
	// The share as the README's CI recipes run it (virtio-fs,
	// --share-cache=always, as --root has it) against the host.
	ReadRatio       float64 `json:"read_ratio"`
	WalkRatio       float64 `json:"walk_ratio"`
	ParallelSpeedup float64 `json:"parallel_speedup"`
	// The host's own 4 readers over 1, in the same run: the ceiling the
	// machine's CPUs put on parallel_speedup when reading is CPU work.
	HostParallelSpeedup float64 `json:"host_parallel_speedup"`
	// The default --share (--share-cache=auto), when it ran.
	AutoReadRatio       float64 `json:"auto_read_ratio,omitempty"`
	AutoWalkRatio       float64 `json:"auto_walk_ratio,omitempty"`
	AutoParallelSpeedup float64 `json:"auto_parallel_speedup,omitempty"`
	// The QEMU virtio-9p anchor's, when it ran.
	QEMU9pReadRatio       float64 `json:"qemu_9p_read_ratio,omitempty"`
	QEMU9pWalkRatio       float64 `json:"qemu_9p_walk_ratio,omitempty"`
	QEMU9pParallelSpeedup float64 `json:"qemu_9p_parallel_speedup,omitempty"`

	QEMURuns int `json:"qemu_runs,omitempty"`
	// The QEMU anchor walks a smaller tree (--qemu-files), which the
	// host walks too: its walk_ratio is against this.
	HostQEMUTreeWalkSecs float64 `json:"host_qemu_tree_walk_s,omitempty"`
	SizeMiB              int     `json:"size_mib"`
	Files                int     `json:"files"`
	Runs                 int     `json:"runs"`
	CPUs                 int     `json:"guest_cpus"`
	Host                 Side    `json:"host"`
	Guest                Side    `json:"guest"` // --share-cache=always
	Auto                 *Side   `json:"cache_auto,omitempty"`
	QEMU9p               *Side   `json:"qemu_9p,omitempty"`
	QEMUWhy              string  `json:"qemu_9p_missing,omitempty"`
}

// MainShare runs the benchmark.
func MainShare(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench share", flag.ContinueOnError)
	size := fs.Int("size", 64, "size in `MiB` of the file read sequentially")
	files := fs.Int("files", 20000, "files in the walked tree")
	runs := fs.Int("runs", 5, "timed runs of each operation (the median is reported)")
	cpus := fs.Int("cpus", 4, "guest vCPUs (the parallel readers run on them)")
	mem := fs.String("mem", "512M", "guest memory")
	measure := fs.String("measure", "", "measure in `DIR` (made by this command) and print one JSON line: what runs inside the guest")
	dir := fs.String("dir", "", "scratch `DIR` for the files (default: a new directory in $TMPDIR)")
	out := fs.String("o", "out/bench/share.json", "write the report to `FILE`")
	auto := fs.Bool("auto", true, "also measure the share with the default --share-cache=auto (the headline is always, the CI recipes' policy)")
	qemu := fs.String("qemu", "auto", "QEMU virtio-9p anchor: auto (when qemu-system-x86_64 and /dev/kvm are there), on or off")
	qemuRuns := fs.Int("qemu-runs", 3, "timed runs of each operation on the QEMU anchor (its 9p walk is slow)")
	qemuTimeout := fs.Duration("qemu-timeout", 4*time.Minute, "bound on the QEMU anchor's VM; past it the anchor is reported missing")
	qemuFiles := fs.Int("qemu-files", 2000, "files in the tree the QEMU anchor walks (a 9p walk costs round trips per file; its walk_ratio is per entry)")
	tree := fs.String("tree", "tree", "with --measure: the `DIR` walked, below the measured directory")
	progress := fs.Bool("progress", false, "with --measure: say on stderr what starts (the QEMU anchor's console, shown if it is killed)")
	extra := fs.String("run-args", "", "extra `ARGS` for tinyvmm run, space-separated")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench share", "Usage: tinyvmm-lab bench share [flags]   a --share (virtio-fs) in the guest against the same operations on the host", args, stdout); help || err != nil {
		return err
	}
	if *size < 1 || *runs < 1 || *files < 1 || *cpus < 1 || *qemuFiles < 1 {
		return cliflag.Usagef("--size, --files, --qemu-files, --runs and --cpus must be at least 1")
	}
	if err := sharefs.CheckName(*tree); err != nil {
		return cliflag.Usagef("--tree %q: give a name in the measured directory", *tree)
	}
	if *measure != "" {
		p := io.Discard
		if *progress {
			p = stderr
		}
		r, err := measureAll(*measure, *tree, *runs, true, p)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(r)
	}

	work := *dir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "tinyvmm-bench-share-"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	}
	// The VMM's --stats files go beside the share, not in it.
	statsDir, err := os.MkdirTemp("", "tinyvmm-bench-share-stats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(statsDir)
	fmt.Fprintf(stderr, "bench share: making %d MiB, %dx%d MiB and a %d-file tree in %s\n", *size, parReaders, parFileSize>>20, *files, work)
	if err := makeFiles(work, int64(*size)<<20, *files); err != nil {
		return err
	}
	if err := makeTree(filepath.Join(work, qemuTree), *qemuFiles); err != nil {
		return err
	}
	// tinyvmm boots the guest; a copy of this command, in the share, is
	// the guest's side of the benchmark.
	vmm, err := tinyvmmbin.Path()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	guestSelf := "./" + filepath.Base(self)
	if err := copyFile(self, filepath.Join(work, filepath.Base(self))); err != nil {
		return err
	}
	rep := Report{SizeMiB: *size, Files: *files, Runs: *runs, CPUs: *cpus}
	write := func() error {
		rep.finish()
		if *out == "" {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		j, _ := json.MarshalIndent(rep, "", "  ")
		return os.WriteFile(*out, append(j, '\n'), 0o644)
	}

	hostRuns, err := measureAll(work, "tree", *runs, false, io.Discard)
	if err != nil {
		return err
	}
	rep.Host = side("host", hostRuns)
	// The anchor's tree, walked on the host too, for its ratio.
	var hostSmall Runs
	for i := 0; i < *runs; i++ {
		start := time.Now()
		n, err := walk(filepath.Join(work, qemuTree))
		if err != nil {
			return err
		}
		hostSmall.WalkSecs = append(hostSmall.WalkSecs, time.Since(start).Seconds())
		hostSmall.Entries = n
	}
	rep.HostQEMUTreeWalkSecs = stats.UpperMedian(hostSmall.WalkSecs)
	if j, err := json.Marshal(rep.Host); err == nil {
		fmt.Fprintf(stderr, "bench share: %s\n", j)
	}

	tinyvmm := func(where, statsFile string, extraArgs ...string) (Side, error) {
		guestArgs := []string{guestSelf, "bench", "share", "--measure", ".", "--runs", fmt.Sprint(*runs)}
		runArgs := append([]string{"run", "--cpus", fmt.Sprint(*cpus), "--mem", *mem, "--share", work, "--stats=" + statsFile}, extraArgs...)
		runArgs = append(runArgs, strings.Fields(*extra)...)
		cmd := exec.Command(vmm, append(append(runArgs, "--"), guestArgs...)...)
		cmd.Dir, cmd.Stderr = work, stderr
		fmt.Fprintf(stderr, "bench share: tinyvmm %s\n", strings.Join(cmd.Args[1:], " "))
		gr, err := guestSide(cmd, 0, guestTimeout, stderr)
		if err != nil {
			return Side{}, fmt.Errorf("tinyvmm guest: %w", err)
		}
		s := side(where, gr)
		s.FUSE = fuseCounts(statsFile, gr)
		j, _ := json.Marshal(s)
		fmt.Fprintf(stderr, "bench share: %s\n", j)
		return s, nil
	}
	if rep.Guest, err = tinyvmm("guest (virtio-fs, cache always)", filepath.Join(statsDir, "always.json"), "--share-cache=always"); err != nil {
		return err
	}
	if *auto {
		s, err := tinyvmm("guest (virtio-fs, cache auto)", filepath.Join(statsDir, "auto.json"))
		if err != nil {
			return err
		}
		rep.Auto = &s
	}
	// Written now too, in case the anchor never ends.
	if err := write(); err != nil {
		return err
	}

	if q, why := qemuCommand(*qemu, work, *mem, max(*qemuRuns, 1), guestSelf+" bench share --measure . --progress --tree "+qemuTree); q != nil {
		fmt.Fprintf(stderr, "bench share: %s\n", strings.Join(q.Args, " "))
		qr, err := guestSide(q, 1, *qemuTimeout, stderr)
		if err != nil {
			rep.QEMUWhy = err.Error()
		} else {
			s := side(fmt.Sprintf("guest (QEMU virtio-9p, %d vCPU)", qr.CPUs), qr)
			rep.QEMU9p = &s
			rep.QEMURuns = max(*qemuRuns, 1)
		}
	} else {
		rep.QEMUWhy = why
	}
	rep.finish() // the anchor's ratios too
	printReport(stdout, &rep)
	if err := write(); err != nil {
		return err
	}
	if *out != "" {
		fmt.Fprintf(stdout, "wrote %s\n", *out)
	}
	return nil
}

// finish computes the ratios from the sides measured.
func (r *Report) finish() {
	r.ReadRatio = r.Guest.ReadMiBs / r.Host.ReadMiBs
	r.WalkRatio = r.Guest.WalkSecs / r.Host.WalkSecs
	r.ParallelSpeedup = r.Guest.Speedup
	r.HostParallelSpeedup = r.Host.Speedup
	if a := r.Auto; a != nil {
		r.AutoReadRatio = a.ReadMiBs / r.Host.ReadMiBs
		r.AutoWalkRatio = a.WalkSecs / r.Host.WalkSecs
		r.AutoParallelSpeedup = a.Speedup
	}
	if q := r.QEMU9p; q != nil {
		r.QEMU9pReadRatio = q.ReadMiBs / r.Host.ReadMiBs
		r.QEMU9pWalkRatio = q.WalkSecs / r.HostQEMUTreeWalkSecs
		r.QEMU9pParallelSpeedup = q.Speedup
	}
}

// FUSE is what the device served one tinyvmm guest, from its --stats.
type FUSE struct {
	Ops map[string]uint64 `json:"ops"`
	// WalkPerEntry: the requests a walk makes (LOOKUP, GETATTR,
	// OPENDIR, READDIR, READDIRPLUS, RELEASEDIR) over the entries all
	// the runs walked. The reads add a few LOOKUPs and GETATTRs: an
	// upper bound.
	WalkPerEntry float64 `json:"walk_requests_per_entry"`
	// ReadKiB is the mean size of a READ reply; ReadMs the mean time
	// the device spent on one (from taking it off the ring to its
	// reply written).
	ReadKiB float64 `json:"read_kib_mean"`
	ReadMs  float64 `json:"read_ms_mean"`
	// Queues: the requests taken off each queue, hiprio first.
	Queues []uint64 `json:"queues,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// fuseCounts reads the device's counters from tinyvmm's --stats file.
func fuseCounts(path string, r Runs) *FUSE {
	var st struct {
		Shares []struct {
			BytesOut  uint64
			Ops       map[string]uint64
			Queues    []uint64
			ReadNanos uint64
		} `json:"shares"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err == nil && len(st.Shares) != 1 {
		err = fmt.Errorf("%d shares in the stats", len(st.Shares))
	}
	if err != nil {
		return &FUSE{Error: err.Error()}
	}
	f := &FUSE{Ops: st.Shares[0].Ops, Queues: st.Shares[0].Queues}
	walk := uint64(0)
	for _, op := range []string{"LOOKUP", "GETATTR", "OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR"} {
		walk += f.Ops[op]
	}
	if n := len(r.WalkSecs) * r.Entries; n > 0 {
		f.WalkPerEntry = float64(walk) / float64(n)
	}
	if n := f.Ops["READ"]; n > 0 {
		f.ReadKiB = float64(st.Shares[0].BytesOut) / float64(n) / 1024
		f.ReadMs = float64(st.Shares[0].ReadNanos) / float64(n) / 1e6
	}
	return f
}

func side(where string, r Runs) Side {
	s := Side{Where: where, Runs: r, ReadMiBs: stats.UpperMedian(r.ReadMiBs), WalkSecs: stats.UpperMedian(r.WalkSecs),
		Par1MiBs: stats.UpperMedian(r.Par1MiBs), Par4MiBs: stats.UpperMedian(r.Par4MiBs), Par1Busy: stats.UpperMedian(r.Par1Busy), Par4Busy: stats.UpperMedian(r.Par4Busy)}
	s.Speedup = s.Par4MiBs / s.Par1MiBs
	return s
}

func printReport(w io.Writer, r *Report) {
	fmt.Fprintf(w, "tinyvmm bench share: medians of %d runs; guest with %d vCPUs, host with %d CPUs\n", r.Runs, r.CPUs, r.Host.Runs.CPUs)
	fmt.Fprintf(w, "%-32s %11s %9s %11s %11s %7s %11s\n", "", "read MiB/s", "walk s", "1 rd MiB/s", "4 rd MiB/s", "4 vs 1", "busy 1 / 4")
	sides := []Side{r.Host, r.Guest}
	if r.Auto != nil {
		sides = append(sides, *r.Auto)
	}
	if r.QEMU9p != nil {
		sides = append(sides, *r.QEMU9p)
	}
	for _, s := range sides {
		fmt.Fprintf(w, "%-32s %11.1f %9.3f %11.1f %11.1f %7.2f %5.2f/%-5.2f\n", s.Where, s.ReadMiBs, s.WalkSecs, s.Par1MiBs, s.Par4MiBs, s.Speedup, s.Par1Busy, s.Par4Busy)
	}
	fmt.Fprintf(w, "read_ratio %.2f  walk_ratio %.2f  parallel_speedup %.2f (the host's own: %.2f)   --share-cache=always\n", r.ReadRatio, r.WalkRatio, r.ParallelSpeedup, r.HostParallelSpeedup)
	if r.Auto != nil {
		fmt.Fprintf(w, "auto_read_ratio %.2f  auto_walk_ratio %.2f  auto_parallel_speedup %.2f   --share-cache=auto\n", r.AutoReadRatio, r.AutoWalkRatio, r.AutoParallelSpeedup)
	}
	for _, s := range sides {
		if f := s.FUSE; f != nil {
			fmt.Fprintf(w, "%s: %.2f walk requests per entry, READs of %.0f KiB, %.1f ms each in the device; requests per queue %v; %v %s\n",
				s.Where, f.WalkPerEntry, f.ReadKiB, f.ReadMs, f.Queues, f.Ops, f.Error)
		}
	}
	if r.QEMU9p != nil {
		fmt.Fprintf(w, "QEMU 9p:   read_ratio %.2f  walk_ratio %.2f  parallel_speedup %.2f\n", r.QEMU9pReadRatio, r.QEMU9pWalkRatio, r.QEMU9pParallelSpeedup)
	} else if r.QEMUWhy != "" {
		fmt.Fprintf(w, "QEMU 9p anchor: missing: %s\n", lastLines(r.QEMUWhy, 12))
	}
}

// lastLines is s's first line and, indented, its last n others: why the
// anchor is missing and where its console stopped.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(s, "\r", ""), "\n"), "\n")
	out := lines[:1]
	rest := lines[1:]
	if len(rest) > n {
		out = append(out, fmt.Sprintf("  ... (%d lines before)", len(rest)-n))
		rest = rest[len(rest)-n:]
	}
	for _, l := range rest {
		out = append(out, "  | "+l)
	}
	return strings.Join(out, "\n")
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// heartbeat is how often guestSide says it is still waiting: the VM's
// console is captured, and a nested runner takes a silent console for a
// frozen L1.
var heartbeat = time.Minute

// guestSide runs a VM whose command prints measureAll's JSON line; ok is
// the VMM's exit status when the command succeeded. A VM still running
// after timeout is killed and is an error, with the end of its output
// (its console, and its stderr unless cmd has one). It says on log,
// every heartbeat, that it is still waiting.
func guestSide(cmd *exec.Cmd, ok int, timeout time.Duration, log io.Writer) (Runs, error) {
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if cmd.Stderr == nil {
		// The VMM's own complaints, in order with its console.
		cmd.Stderr = &stdout
	}
	if err := cmd.Start(); err != nil {
		return Runs{}, err
	}
	var err error
	done := make(chan struct{})
	go func() {
		err = cmd.Wait()
		close(done)
	}()
	start := time.Now()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	bound := time.NewTimer(timeout)
	defer bound.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			fmt.Fprintf(log, "bench share: %s still running after %v\n", filepath.Base(cmd.Path), time.Since(start).Round(time.Second))
			continue
		case <-bound.C:
		}
		cmd.Process.Kill()
		<-done
		return Runs{}, fmt.Errorf("no result after %v (killed); the end of its output:\n%s", timeout, tail(stdout.Bytes(), 2000))
	}
	out := stdout.Bytes()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == ok {
		err = nil
	}
	if err != nil {
		return Runs{}, fmt.Errorf("%v; its output:\n%s", err, out)
	}
	var r Runs
	if err := json.Unmarshal([]byte(lastJSONLine(string(out))), &r); err != nil {
		return Runs{}, fmt.Errorf("no result: %v; its output:\n%s", err, out)
	}
	return r, nil
}

// qemuTree is the smaller tree the QEMU anchor walks.
const qemuTree = "qtree"

// makeFiles writes the data file, the parallel readers' files and the tree.
func makeFiles(dir string, size int64, files int) error {
	if err := writeFile(filepath.Join(dir, "data"), size); err != nil {
		return err
	}
	for i := 0; i < parReaders; i++ {
		if err := writeFile(filepath.Join(dir, fmt.Sprintf("par%d", i)), parFileSize); err != nil {
			return err
		}
	}
	return makeTree(filepath.Join(dir, "tree"), files)
}

// makeTree makes a tree of files empty files, perDir to a directory.
func makeTree(tree string, files int) error {
	for i := 0; i < files; i++ {
		d := filepath.Join(tree, fmt.Sprintf("d%03d", i/perDir))
		if i%perDir == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		f, err := os.Create(filepath.Join(d, fmt.Sprintf("f%05d", i)))
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// measureAll times each operation runs times in dir, interleaved, walking
// dir/tree, and says on progress what it starts (in a guest: its console,
// which a VM killed at its bound shows). With evict (in a guest), each
// parallel cell first drops the cached pages of its files.
func measureAll(dir, tree string, runs int, evict bool, progress io.Writer) (Runs, error) {
	r := Runs{CPUs: runtime.NumCPU()}
	fi, err := os.Stat(filepath.Join(dir, "data"))
	if err != nil {
		return r, err
	}
	mib := float64(fi.Size()) / (1 << 20)
	for i := 0; i < runs; i++ {
		fmt.Fprintf(progress, "bench share: run %d: read\n", i+1)
		start := time.Now()
		if err := readAll(filepath.Join(dir, "data")); err != nil {
			return r, err
		}
		r.ReadMiBs = append(r.ReadMiBs, mib/time.Since(start).Seconds())

		fmt.Fprintf(progress, "bench share: run %d: walk\n", i+1)
		start = time.Now()
		n, err := walk(filepath.Join(dir, tree))
		if err != nil {
			return r, err
		}
		r.WalkSecs = append(r.WalkSecs, time.Since(start).Seconds())
		r.Entries = n

		for _, readers := range []int{1, parReaders} {
			fmt.Fprintf(progress, "bench share: run %d: %d readers\n", i+1, readers)
			if evict {
				for k := 0; k < readers; k++ {
					if err := dropCached(filepath.Join(dir, fmt.Sprintf("par%d", k))); err != nil {
						return r, err
					}
				}
			}
			cpu0, cpuErr := cpuBusy()
			start = time.Now()
			var wg sync.WaitGroup
			errs := make([]error, readers)
			for k := 0; k < readers; k++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[k] = readAll(filepath.Join(dir, fmt.Sprintf("par%d", k)))
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return r, err
			}
			wall := time.Since(start)
			rate := float64(readers*parFileSize) / (1 << 20) / wall.Seconds()
			cpu1, err := cpuBusy()
			busy := -1.0 // no /proc/stat, or a cell too short to tell
			if cpuErr == nil && err == nil && wall >= minBusyWall {
				busy = (cpu1 - cpu0).Seconds() / wall.Seconds()
			}
			if readers == 1 {
				r.Par1MiBs = append(r.Par1MiBs, rate)
				r.Par1Busy = append(r.Par1Busy, busy)
			} else {
				r.Par4MiBs = append(r.Par4MiBs, rate)
				r.Par4Busy = append(r.Par4Busy, busy)
			}
		}
	}
	return r, nil
}

// dropCached drops the page cache's clean pages of path, so the next read
// asks the file system (in a guest: the share) again.
func dropCached(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("%s: fadvise DONTNEED: %w", path, err)
	}
	return nil
}

// minBusyWall is the shortest parallel cell whose busy CPUs are told:
// /proc/stat counts in clock ticks (10 ms), so over a cell of a few ms
// one tick per CPU reads as several CPUs kept busy.
const minBusyWall = time.Second

// cpuBusy is the CPU time every CPU has spent not idle (and not waiting
// for I/O) since boot, from /proc/stat's first line.
func cpuBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %q", line)
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal ...: all but idle
	// and iowait; guest time is already inside user.
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q", line)
		}
		busy += n
	}
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(busy) * 10 * time.Millisecond, nil
}

// walk lstats every entry below root, as find | xargs stat does.
func walk(root string) (int, error) {
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, readChunk)
	for {
		_, err := f.Read(buf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// writeFile writes n bytes that do not compress or repeat in a page.
func writeFile(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	x := uint64(0x9e3779b97f4a7c15)
	for written := int64(0); written < n; written += int64(len(buf)) {
		for i := 0; i+8 <= len(buf); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			for k := 0; k < 8; k++ {
				buf[i+k] = byte(x >> (8 * k))
			}
		}
		if _, err := f.Write(buf[:min(int64(len(buf)), n-written)]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// lastJSONLine picks the result out of the guest's console output.
func lastJSONLine(out string) string {
	lines := strings.Split(strings.ReplaceAll(out, "\r", ""), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			return lines[i]
		}
	}
	return ""
}
