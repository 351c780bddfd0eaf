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

func TestConsoleNoise(t *testing.T) {
	if !consoleNoise.MatchString("[   13.398320] kvm [60]: vcpu0, guest rIP") || consoleNoise.MatchString(" 1. the guest's driver") {
		t.Error("consoleNoise does not tell L1's kernel lines from the story")
	}
}
