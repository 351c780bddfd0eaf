package device

import (
	"io"
	"strings"
	"testing"
)

func TestMainDeviceRejectsBadFlagsInOneLine(t *testing.T) {
	for _, args := range [][]string{{"--only", "7"}, {"--weights", "a"}, {"extra"}, {"--nope"}} {
		err := MainDevice(args, io.Discard, io.Discard)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v", args, err)
		}
	}
	for _, args := range [][]string{{"--weights", ""}, {"--thresholds", " , "}} {
		if err := MainDevice(args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no values") {
			t.Errorf("%v: %v, want no values", args, err)
		}
	}
	if err := MainDevice([]string{"--help"}, io.Discard, io.Discard); err != nil {
		t.Errorf("--help: %v", err)
	}
}
