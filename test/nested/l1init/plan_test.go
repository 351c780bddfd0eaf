package main

import (
	"bytes"
	"slices"
	"testing"
)

func TestPlanWords(t *testing.T) {
	for line, want := range map[string][]string{
		"":                           nil,
		"  # a comment":              nil,
		"cd /repo":                   {"cd", "/repo"},
		"/repo/x.test -test.v # why": {"/repo/x.test", "-test.v"},
		`["sh","-c","ping -c 2 10.0.2.1 && echo '#ok'"]`: {"sh", "-c", "ping -c 2 10.0.2.1 && echo '#ok'"},
	} {
		got, err := planWords(line)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("planWords(%q) = %q, %v; want %q", line, got, err, want)
		}
	}
	if _, err := planWords(`["unclosed`); err == nil {
		t.Error("a broken JSON line was accepted")
	}
}

// Each line a marked step prints reaches the console after OutMarker,
// however the writes split it; a last line without a newline too.
func TestLineMarker(t *testing.T) {
	var out bytes.Buffer
	m := &lineMarker{w: &out}
	for _, w := range []string{"one\ntw", "o\n", "\nthree"} {
		if n, err := m.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	m.Flush()
	want := OutMarker + "one\n" + OutMarker + "two\n" + OutMarker + "\n" + OutMarker + "three\n"
	if out.String() != want {
		t.Errorf("console %q, want %q", out.String(), want)
	}
}
