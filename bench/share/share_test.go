package share

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestMeasureSide runs the guest side (--measure) on the host over small
// files: every operation timed each run, the whole tree walked, one JSON
// line printed.
func TestMeasureSide(t *testing.T) {
	dir := t.TempDir()
	if err := makeFiles(dir, 3<<20+123, 250); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := MainShare([]string{"--measure", dir, "--runs", "2"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var r Runs
	if err := json.Unmarshal([]byte(lastJSONLine("boot noise\r\n"+out.String())), &r); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	// 250 files in 3 directories, and the tree itself.
	if len(r.ReadMiBs) != 2 || len(r.WalkSecs) != 2 || len(r.Par1MiBs) != 2 || len(r.Par4MiBs) != 2 || r.Entries != 254 {
		t.Fatalf("runs %+v", r)
	}
	// Busy CPUs for each parallel cell, from /proc/stat: at most the CPUs
	// there are (plus a tick of rounding per CPU), or -1 for a cell
	// shorter than minBusyWall, as these few-MiB cells are.
	if len(r.Par1Busy) != 2 || len(r.Par4Busy) != 2 || r.CPUs < 1 {
		t.Fatalf("busy CPUs %+v", r)
	}
	for _, b := range append(r.Par1Busy, r.Par4Busy...) {
		if b != -1 && (b < 0 || b > float64(r.CPUs)*1.1) {
			t.Fatalf("busy CPUs %v of %d", b, r.CPUs)
		}
	}
	s := side("host", r)
	if s.ReadMiBs <= 0 || s.WalkSecs <= 0 || s.Speedup <= 0 {
		t.Fatalf("side %+v", s)
	}
	if err := MainShare([]string{"--runs", "0"}, &out, &out); err == nil {
		t.Fatal("--runs 0 accepted")
	}
}

// TestGuestSideTimeout: a VM that never prints its result is killed at
// the bound and reported, so the report is still written; meanwhile the
// wait says, every heartbeat, that it goes on (a nested runner takes a
// silent console for a frozen L1).
func TestGuestSideTimeout(t *testing.T) {
	defer func(h time.Duration) { heartbeat = h }(heartbeat)
	heartbeat = 10 * time.Millisecond
	var log bytes.Buffer
	start := time.Now()
	_, err := guestSide(exec.Command("sleep", "60"), 0, 2*time.Second, &log)
	if err == nil || !strings.Contains(err.Error(), "no result after") {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v", d)
	}
	if !strings.Contains(log.String(), "bench share: sleep still running after") {
		t.Fatalf("no heartbeat: %q", log.String())
	}
}

// TestFUSECounts reads the device's counters from a --stats file.
func TestFUSECounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stats.json")
	stats := `{"shares": [{"Tag": "tinyvmm0", "BytesOut": 2097152, "Ops": {"READ": 2, "LOOKUP": 10, "READDIRPLUS": 20, "OPENDIR": 5, "RELEASEDIR": 5}}]}`
	if err := os.WriteFile(path, []byte(stats), 0o644); err != nil {
		t.Fatal(err)
	}
	f := fuseCounts(path, Runs{WalkSecs: []float64{1, 1}, Entries: 20})
	if f.Error != "" || f.WalkPerEntry != 1 || f.ReadKiB != 1024 || f.Ops["READDIRPLUS"] != 20 {
		t.Fatalf("%+v", f)
	}
	if f := fuseCounts(filepath.Join(t.TempDir(), "none"), Runs{}); f.Error == "" {
		t.Fatal("a missing file gave no error")
	}
}

// TestHeadlineIsAlways: the top-level ratios are the --share-cache=always
// guest's (the CI recipes' path), the default policy's carry auto_, and
// the host's own 4 readers over 1 stands beside them.
func TestHeadlineIsAlways(t *testing.T) {
	r := Report{
		Host:  Side{ReadMiBs: 200, WalkSecs: 1, Speedup: 1.8},
		Guest: Side{ReadMiBs: 100, WalkSecs: 2, Speedup: 1.5},
		Auto:  &Side{ReadMiBs: 50, WalkSecs: 10, Speedup: 1.2},
	}
	r.finish()
	if r.ReadRatio != 0.5 || r.WalkRatio != 2 || r.ParallelSpeedup != 1.5 || r.HostParallelSpeedup != 1.8 {
		t.Fatalf("headline %+v", r)
	}
	if r.AutoReadRatio != 0.25 || r.AutoWalkRatio != 10 || r.AutoParallelSpeedup != 1.2 {
		t.Fatalf("auto %+v", r)
	}
	j, _ := json.Marshal(r)
	for _, k := range []string{`"read_ratio":0.5`, `"walk_ratio":2`, `"parallel_speedup":1.5`, `"host_parallel_speedup":1.8`, `"auto_read_ratio":0.25`, `"auto_walk_ratio":10`, `"auto_parallel_speedup":1.2`} {
		if !strings.Contains(string(j), k) {
			t.Errorf("share.json has no %s: %s", k, j)
		}
	}
}

// TestMissingAnchorShowsConsole: a QEMU anchor killed at its bound is
// reported with the end of its console, not one line.
func TestMissingAnchorShowsConsole(t *testing.T) {
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("[    %d.0] boot line %d", i, i))
	}
	r := Report{Host: Side{ReadMiBs: 1, WalkSecs: 1}, QEMUWhy: "no result after 4m0s (killed); the end of its output:\n" + strings.Join(lines, "\r\n")}
	r.finish()
	var out bytes.Buffer
	printReport(&out, &r)
	for _, want := range []string{"QEMU 9p anchor: missing: no result after 4m0s (killed)", "(18 lines before)", "  | [    29.0] boot line 29", "  | [    18.0] boot line 18"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "boot line 17\n") {
		t.Errorf("more than 12 lines of the console:\n%s", out.String())
	}
}

// TestDropCached: dropCached leaves none of a file's pages in the page
// cache (where the file system keeps them: not on tmpfs).
func TestDropCached(t *testing.T) {
	dir, err := os.MkdirTemp(".", "dropcached-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC {
		t.Skip("tmpfs keeps its pages")
	}
	path := filepath.Join(dir, "f")
	if err := writeFile(path, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := readAll(path); err != nil {
		t.Fatal(err)
	}
	resident := func() int {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(m)
		vec := make([]byte, (1<<20)/os.Getpagesize())
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if f, err := os.Open(path); err == nil {
		unix.Fsync(int(f.Fd())) // dirty pages are not dropped
		f.Close()
	}
	if err := readAll(path); err != nil {
		t.Fatal(err)
	}
	if resident() == 0 {
		t.Skip("this file system keeps no pages of a file just read")
	}
	if err := dropCached(path); err != nil {
		t.Fatal(err)
	}
	if n := resident(); n != 0 {
		t.Fatalf("%d pages still cached after dropCached", n)
	}
}
