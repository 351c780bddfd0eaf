package share

import (
	"bytes"
	"encoding/json"
	"testing"
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
