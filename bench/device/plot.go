package device

import (
	"fmt"

	"tinyvmm/internal/plotfmt"
)

// Plots returns a chart of each of the three seed tables that r holds, in
// the order 002, 004, 000 (the tour draws them one by one).
func Plots(r *Results) []*plotfmt.Chart {
	var cs []*plotfmt.Chart
	for _, mk := range []func(*Results) *plotfmt.Chart{plotSeed002, plotSeed004, plotSeed000} {
		if c := mk(r); c != nil {
			cs = append(cs, c)
		}
	}
	return cs
}

// plotResults draws the three tables side by side into an SVG file.
func plotResults(r *Results, path string) error {
	row := Plots(r)
	if len(row) == 0 {
		return nil
	}
	return plotfmt.SaveSVG(path, 500, 420, row...)
}

func plotSeed002(r *Results) *plotfmt.Chart {
	if len(r.Seed002) == 0 {
		return nil
	}
	c := &plotfmt.Chart{Title: "Seed 002: latency under a 1-byte UDP flood", XLabel: "tx packet weight", YLabel: "request latency (ms)"}
	avg, p99 := plotfmt.Series{Name: "avg"}, plotfmt.Series{Name: "p99"}
	for _, row := range r.Seed002 {
		avg.Y, p99.Y = append(avg.Y, row.AvgMs), append(p99.Y, row.P99Ms)
		name := plotWeightName(row.Weight)
		if row.Yield > 0 {
			name += fmt.Sprintf("+y%d", row.Yield)
		}
		c.Categories = append(c.Categories, name)
	}
	c.Lines = []plotfmt.Series{avg, p99}
	return c
}

// plotWeightName names a weight on the chart's axis as the tour's table
// does: "none" for no packet weight (the seed patch's "Origin").
func plotWeightName(w int) string {
	if w == 0 {
		return "none"
	}
	return fmt.Sprint(w)
}

func plotSeed004(r *Results) *plotfmt.Chart {
	if len(r.Seed004) == 0 {
		return nil
	}
	c := &plotfmt.Chart{Title: "Seed 004: rx batch 1 vs 64", YLabel: "rx frames/s"}
	one, many := plotfmt.Series{Name: "batch 1"}, plotfmt.Series{Name: "batch 64"}
	for _, key := range []struct {
		be  string
		mrg bool
	}{{"tap", false}, {"tap", true}, {"af_packet", false}, {"af_packet", true}} {
		name := key.be + " small"
		if key.mrg {
			name = key.be + " mrg"
		}
		c.Categories = append(c.Categories, name)
		for _, row := range r.Seed004 {
			if row.Mergeable != key.mrg || row.Backend != key.be {
				continue
			}
			if row.Batch == 1 {
				one.Y = append(one.Y, row.PPS)
			} else {
				many.Y = append(many.Y, row.PPS)
			}
		}
	}
	c.Bars = []plotfmt.Series{one, many}
	return c
}

func plotSeed000(r *Results) *plotfmt.Chart {
	if len(r.Seed000) == 0 {
		return nil
	}
	c := &plotfmt.Chart{Title: "Seed 000: notification threshold", XLabel: "threshold (chains per used publish)", YLabel: "tx frames/s"}
	l := plotfmt.Series{Name: "tx pps"}
	for _, row := range r.Seed000 {
		l.X, l.Y = append(l.X, float64(row.Threshold)), append(l.Y, row.PPS)
	}
	c.Lines = []plotfmt.Series{l}
	return c
}
