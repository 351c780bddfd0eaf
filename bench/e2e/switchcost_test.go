package e2e

import (
	"os"
	"strings"
	"testing"
)

// TestMain lets this test binary be MeasureSwitchCost's other process.
func TestMain(m *testing.M) {
	if len(os.Args) > 3 && os.Args[1] == "bench" && os.Args[2] == "e2e" && os.Args[3] == "switchecho" {
		if err := MainSwitchEcho(os.Args[4:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestMeasureSwitchCost(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s, err := MeasureSwitchCost(self)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPU < 0 || s.Threads <= 0 || s.Processes <= 0 {
		t.Fatalf("%+v", s)
	}
	if !strings.Contains(s.String(), "between two processes") {
		t.Errorf("String: %q", s)
	}
	t.Log(s)
}

func TestMeasureSwitchCostReportsADeadHelper(t *testing.T) {
	if _, err := MeasureSwitchCost("/bin/false"); err == nil {
		t.Fatal("no error from a helper that never answers")
	}
}

func TestSwitchEchoWantsItsArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"0"}, {"x", "5"}, {"0", "y"}} {
		if err := MainSwitchEcho(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
