package e2e

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"tinyvmm/bench/labplot"
	"tinyvmm/internal/plotfmt"
)

// plot draws e2e-throughput.png (pps per system, the medians), e2e-kick.png
// (experiment 000: the kick threshold sweep) and e2e-weight.png
// (experiment 002: the tx weight sweep, when tinyvmm ran).
func (r *Report) plot(dir string) error {
	if err := r.plotThroughput(filepath.Join(dir, "e2e-throughput.png")); err != nil {
		return fmt.Errorf("bench e2e: throughput plot: %w", err)
	}
	if err := r.plotKicks(filepath.Join(dir, "e2e-kick.png")); err != nil {
		return fmt.Errorf("bench e2e: kick plot: %w", err)
	}
	if err := r.plotWeights(filepath.Join(dir, "e2e-weight.png")); err != nil {
		return fmt.Errorf("bench e2e: weight plot: %w", err)
	}
	return nil
}

func (r *Report) plotThroughput(file string) error {
	c := &plotfmt.Chart{Title: "bench e2e: frames per second (median; failed or skipped = 0)", YLabel: "pps",
		Categories: []string{"guest->host 64 B", "guest->host 1400 B", "host->guest 64 B"}}
	metrics := []string{"tx64", "tx1400", "rx64"}
	for _, s := range []System{SysTinyvmm, SysCeiling, SysQEMUVhost, SysQEMU} {
		bars := plotfmt.Series{Name: r.Systems[s].Label, Y: make([]float64, len(metrics))}
		for j, m := range metrics {
			_, bars.Y[j], _ = r.value(m, s, "")
		}
		c.Bars = append(c.Bars, bars)
	}
	return labplot.SavePNG(file, 680, 420, c)
}

// sweepLines adds one line per system over the sweep's x values (log
// scale); false when there is nothing to draw.
func (r *Report) sweepLines(c *plotfmt.Chart, prefix, detail string, systems []System) bool {
	drawn, xs := false, map[float64]bool{}
	for _, s := range systems {
		l := plotfmt.Series{Name: r.Systems[s].Label + " " + strings.TrimSuffix(detail, "_us")}
		for _, e := range r.exps {
			if !strings.HasPrefix(e.Key, prefix) {
				continue
			}
			x, _ := strconv.Atoi(strings.TrimPrefix(e.Key, prefix))
			if x == 0 {
				x = 8192 // "unlimited" weight, drawn past the largest one
			}
			if _, v, ok := r.value(e.Key, s, detail); ok {
				l.X, l.Y = append(l.X, float64(x)), append(l.Y, v)
				xs[float64(x)] = true
			}
		}
		if len(l.Y) == 0 {
			continue
		}
		drawn = true
		c.Lines = append(c.Lines, l)
	}
	if len(xs) > 1 { // a log axis needs a range
		c.LogX = true
		c.XTicks = c.XTicks[:0]
		for x := range xs {
			c.XTicks = append(c.XTicks, x)
		}
		sort.Float64s(c.XTicks)
	}
	return drawn
}

func (r *Report) plotKicks(file string) error {
	c := &plotfmt.Chart{Title: "seed 000: tx 64 B pps vs kick threshold", XLabel: "frames per notify decision (kick=N)", YLabel: "pps"}
	if !r.sweepLines(c, "kick", "", []System{SysTinyvmm, SysQEMUVhost, SysQEMU}) {
		c.Title += " (no data)"
	}
	return labplot.SavePNG(file, 600, 380, c)
}

func (r *Report) plotWeights(file string) error {
	c := &plotfmt.Chart{Title: "seed 002: ping under tx flood vs tinyvmm --tx-weight-pkts (8192 = unlimited)",
		XLabel: "tx weight (packets)", YLabel: "us"}
	drawn := false
	for _, d := range []string{"avg_us", "p99_us"} {
		drawn = r.sweepLines(c, "weight", d, []System{SysTinyvmm}) || drawn
	}
	if !drawn {
		c.Title += " (no data: " + r.Systems[SysTinyvmm].Skip + ")"
	}
	return labplot.SavePNG(file, 600, 380, c)
}
