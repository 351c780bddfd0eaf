package textwrap

import (
	"slices"
	"testing"
)

func TestColumns(t *testing.T) {
	for _, tc := range []struct {
		text  string
		width int
		want  []string
	}{
		{"", 10, nil},
		{"a bb ccc dddd", 6, []string{"a bb", "ccc", "dddd"}},
		{"  spaced   out  ", 20, []string{"spaced out"}},
		{"averyveryverylongword x", 5, []string{"averyveryverylongword", "x"}},
	} {
		if got := Columns(tc.text, tc.width); !slices.Equal(got, tc.want) {
			t.Errorf("Columns(%q, %d) = %q, want %q", tc.text, tc.width, got, tc.want)
		}
	}
}
