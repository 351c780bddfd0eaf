package main

import (
	"strings"
	"testing"
)

func TestTourUsage(t *testing.T) {
	var out, errb strings.Builder
	if st := dispatch([]string{"tour", "--help"}, &out, &errb); st != 0 || !strings.Contains(out.String(), "Usage: tinyvmm tour") {
		t.Errorf("--help: status %d, stdout %q", st, out.String())
	}
	for _, args := range [][]string{{"tour", "extra"}, {"tour", "--nope"}} {
		out.Reset()
		errb.Reset()
		if st := dispatch(args, &out, &errb); st != exitUsage || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%q: status %d, stderr %q; want %d and one line", args, st, errb.String(), exitUsage)
		}
	}
}

// A page that cannot be written fails at once, in one line, before any
// boot.
func TestTourHTMLBadPath(t *testing.T) {
	var out, errb strings.Builder
	st := dispatch([]string{"tour", "--html", "/nonexistent-dir/tour.html"}, &out, &errb)
	if st != exitRuntime || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "/nonexistent-dir/tour.html") {
		t.Errorf("status %d, stderr %q; want %d and one line naming the file", st, errb.String(), exitRuntime)
	}
}
