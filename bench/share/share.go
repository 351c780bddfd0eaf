// Package share is `tinyvmm-lab bench share`: read throughput of a file on a
// --share (virtio-9p) in the guest against the same read on the host.
//
// The same two readers run on both sides: `cat FILE` with its output
// thrown away (the everyday tool; busybox cat in the guest), and a Go
// loop of 512000-byte reads (one 9p message each at the guest's msize).
// The guest side is this binary itself, copied into the share and run
// there with --read, so nothing but the file system differs.
package share

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"tinyvmm/bench/tinyvmmbin"
	"tinyvmm/internal/cliflag"
)

// readChunk is the Go reader's read size: the guest's msize, 512000.
const readChunk = 512000

// Result is one side's measurement: median MiB/s over the runs.
type Result struct {
	Where    string    `json:"where"`
	Bytes    int64     `json:"bytes"`
	CatMiBs  float64   `json:"cat_mib_s"`
	ReadMiBs float64   `json:"read_mib_s"`
	CatRuns  []float64 `json:"cat_runs"`
	ReadRuns []float64 `json:"read_runs"`
}

// MainShare runs the benchmark.
func MainShare(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench share", flag.ContinueOnError)
	size := fs.Int64("size", 64, "file size in `MiB`")
	runs := fs.Int("runs", 3, "timed reads of each kind (the median is reported)")
	read := fs.String("read", "", "measure reading `FILE` here and print one JSON line (what runs inside the guest)")
	dir := fs.String("dir", "", "scratch `DIR` for the file (default: a new directory in $TMPDIR)")
	extra := fs.String("run-args", "", "extra `ARGS` for tinyvmm run, space-separated (e.g. --mem 512M)")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench share", "Usage: tinyvmm bench share [flags]   read throughput of a --share file in the guest vs the same read on the host\n\nFlags:", args, stdout); help || err != nil {
		return err
	}
	if *size < 1 || *runs < 1 {
		return cliflag.Usagef("--size and --runs must be at least 1")
	}
	if *read != "" {
		r, err := measure(*read, *runs, "here")
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
	file := filepath.Join(work, "data")
	if err := writeFile(file, *size<<20); err != nil {
		return err
	}
	// tinyvmm boots the guest; a copy of this command, in the share, is
	// the guest's reader.
	vmm, err := tinyvmmbin.Path()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := copyFile(self, filepath.Join(work, filepath.Base(self))); err != nil {
		return err
	}
	host, err := measure(file, *runs, "host")
	if err != nil {
		return err
	}
	runArgs := append([]string{"run", "--share", work}, strings.Fields(*extra)...)
	runArgs = append(runArgs, "--", "./"+filepath.Base(self), "bench", "share", "--read", "data", "--runs", fmt.Sprint(*runs))
	cmd := exec.Command(vmm, runArgs...)
	cmd.Dir, cmd.Stderr = work, stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("guest side: %v; its output:\n%s", err, out)
	}
	var guest Result
	if err := json.Unmarshal([]byte(lastJSONLine(string(out))), &guest); err != nil {
		return fmt.Errorf("guest side printed no result: %v; its output:\n%s", err, out)
	}
	guest.Where = "guest (9p)"
	fmt.Fprintf(stdout, "read of a %d MiB file, median of %d runs (MiB/s)\n", *size, *runs)
	fmt.Fprintf(stdout, "%-12s %10s %16s\n", "", "cat", "Go 512000-B reads")
	for _, r := range []Result{host, guest} {
		fmt.Fprintf(stdout, "%-12s %10.1f %16.1f\n", r.Where, r.CatMiBs, r.ReadMiBs)
	}
	fmt.Fprintf(stdout, "guest/host   %9.1f%% %15.1f%%\n", 100*guest.CatMiBs/host.CatMiBs, 100*guest.ReadMiBs/host.ReadMiBs)
	return nil
}

// measure times cat and the Go reader on path, runs times each.
func measure(path string, runs int, where string) (Result, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Result{}, err
	}
	r := Result{Where: where, Bytes: fi.Size()}
	mib := float64(fi.Size()) / (1 << 20)
	for i := 0; i < runs; i++ {
		start := time.Now()
		cmd := exec.Command("cat", path) // stdout nil: /dev/null
		if err := cmd.Run(); err != nil {
			return r, fmt.Errorf("cat %s: %w", path, err)
		}
		r.CatRuns = append(r.CatRuns, mib/time.Since(start).Seconds())

		start = time.Now()
		if err := readAll(path); err != nil {
			return r, err
		}
		r.ReadRuns = append(r.ReadRuns, mib/time.Since(start).Seconds())
	}
	r.CatMiBs, r.ReadMiBs = median(r.CatRuns), median(r.ReadRuns)
	return r, nil
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

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
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
