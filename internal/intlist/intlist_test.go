package intlist

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string][]int{
		"1-3, 8,16": {1, 2, 3, 8, 16},
		"1, 2,,64":  {1, 2, 64},
		"0":         {0},
		"":          nil,
	} {
		if got, err := Parse(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "1,x", "5-2", "-1", "1-x", "0-200000"} {
		if v, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, v)
		}
	}
}

func TestFormatRoundTrips(t *testing.T) {
	v := []int{0, 64, 4096}
	if s := Format(v); s != "0,64,4096" {
		t.Fatalf("Format = %q", s)
	}
	if got, _ := Parse(Format(v)); !slices.Equal(got, v) {
		t.Errorf("round trip %v", got)
	}
}
