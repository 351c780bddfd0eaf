// Package intlist reads and writes the lists of counts that the benchmarks'
// sweep flags take: "1,2,8", "1-64" or a mix; empty items are skipped.
package intlist

import (
	"fmt"
	"strconv"
	"strings"
)

// maxRange bounds a range so that a typo cannot ask for billions of runs.
const maxRange = 100000

// Parse reads a list such as "0,64,256" or "1-8,16". An empty string is
// an empty list; a negative number, a backwards range or a word is an error.
func Parse(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a count (use e.g. 1,2,4 or 1-64)", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a || b-a > maxRange {
				return nil, fmt.Errorf("%q is not a range (use e.g. 1-64)", part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// Format writes v as Parse reads it: "1,2,8".
func Format(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
