package main

import (
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
