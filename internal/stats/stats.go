// Package stats has the order statistics the benchmarks report by.
package stats

import "slices"

// Median is the middle value of v, the mean of the middle two for an even
// count, and 0 for none. v is left as it is.
func Median(v []float64) float64 {
	s := sorted(v)
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// UpperMedian is the middle value of v, the upper of the middle two for
// an even count (so always one of v's own values: a run that happened),
// and 0 for none. v is left as it is.
func UpperMedian(v []float64) float64 {
	s := sorted(v)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func sorted(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}
