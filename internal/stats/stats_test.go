package stats

import (
	"slices"
	"testing"
)

func TestMedians(t *testing.T) {
	for _, c := range []struct {
		v           []float64
		median, upp float64
	}{
		{nil, 0, 0},
		{[]float64{7}, 7, 7},
		{[]float64{3, 1}, 2, 3},
		{[]float64{5, 1, 3}, 3, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 3},
	} {
		in := slices.Clone(c.v)
		if got := Median(c.v); got != c.median {
			t.Errorf("Median(%v) = %g, want %g", c.v, got, c.median)
		}
		if got := UpperMedian(c.v); got != c.upp {
			t.Errorf("UpperMedian(%v) = %g, want %g", c.v, got, c.upp)
		}
		if !slices.Equal(in, c.v) {
			t.Errorf("the input was sorted in place: %v", c.v)
		}
	}
}
