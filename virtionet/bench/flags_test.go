package bench

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseInts(t *testing.T) {
	got, err := parseInts("1-3, 8,16")
	if err != nil || !reflect.DeepEqual(got, []int{1, 2, 3, 8, 16}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"x", "5-2", "", "-1"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMainDeviceRejectsBadFlagsInOneLine(t *testing.T) {
	for _, args := range [][]string{{"--only", "7"}, {"--weights", "a"}, {"extra"}, {"--nope"}} {
		err := MainDevice(args, io.Discard, io.Discard)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v", args, err)
		}
	}
	if err := MainDevice([]string{"--help"}, io.Discard, io.Discard); err != nil {
		t.Errorf("--help: %v", err)
	}
}
