package share

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
