package share

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadSide runs the guest side (--read) on the host: it must time both
// readers over the whole file and print one JSON result.
func TestReadSide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if err := writeFile(path, 3<<20+123); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 3<<20+123 {
		t.Fatalf("file size %d", fi.Size())
	}
	var out bytes.Buffer
	if err := MainShare([]string{"--read", path, "--runs", "2"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal([]byte(lastJSONLine("boot noise\r\n"+out.String())), &r); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	if r.Bytes != 3<<20+123 || len(r.CatRuns) != 2 || len(r.ReadRuns) != 2 || r.CatMiBs <= 0 || r.ReadMiBs <= 0 {
		t.Fatalf("result %+v", r)
	}
	if err := MainShare([]string{"--runs", "0"}, &out, &out); err == nil {
		t.Fatal("--runs 0 accepted")
	}
}

// -h and --help print the usage and the flags to stdout and are no error
// (the CLI exits 0), as for the other benchmarks.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		if err := MainShare([]string{arg}, &out, &errOut); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
		if s := out.String(); !strings.HasPrefix(s, "Usage: tinyvmm bench share") || !strings.Contains(s, "-runs") {
			t.Errorf("%s: stdout %q, want the usage and the flags", arg, s)
		}
		if errOut.Len() != 0 {
			t.Errorf("%s: stderr %q", arg, errOut.String())
		}
	}
}
