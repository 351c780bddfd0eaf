package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

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
	p := plot.New()
	p.Title.Text = "bench e2e: frames per second (median; failed or skipped = 0)"
	p.Y.Label.Text = "pps"
	metrics := []string{"tx64", "tx1400", "rx64"}
	systems := []System{SysTinyvmm, SysCeiling, SysQEMU}
	width := vg.Points(18)
	for i, s := range systems {
		vals := make(plotter.Values, len(metrics))
		for j, m := range metrics {
			_, vals[j], _ = r.value(m, s, "")
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(i-1)
		p.Add(bars)
		p.Legend.Add(r.Systems[s].Label, bars)
	}
	p.Y.Tick.Marker = plotfmt.Ticks{}
	p.NominalX("guest->host 64 B", "guest->host 1400 B", "host->guest 64 B")
	return plotfmt.SavePNG(p, 18*vg.Centimeter, 11*vg.Centimeter, file)
}

// sweepLines adds one line per system over the sweep's x values (log
// scale); false when there is nothing to draw.
func (r *Report) sweepLines(p *plot.Plot, prefix, detail string, systems []System) (bool, error) {
	drawn, xs := false, map[float64]bool{}
	for i, s := range systems {
		var pts plotter.XYs
		for _, e := range r.exps {
			if !strings.HasPrefix(e.Key, prefix) {
				continue
			}
			x, _ := strconv.Atoi(strings.TrimPrefix(e.Key, prefix))
			if x == 0 {
				x = 8192 // "unlimited" weight, drawn past the largest one
			}
			if _, v, ok := r.value(e.Key, s, detail); ok {
				pts = append(pts, plotter.XY{X: float64(x), Y: v})
				xs[float64(x)] = true
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return false, err
		}
		drawn = true
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		p.Add(l, sc)
		p.Legend.Add(r.Systems[s].Label+" "+strings.TrimSuffix(detail, "_us"), l)
	}
	if len(xs) > 1 { // a log axis needs a range
		p.X.Scale = plot.LogScale{}
		var ticks []plot.Tick
		for x := range xs {
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	return drawn, nil
}

func (r *Report) plotKicks(file string) error {
	p := plot.New()
	p.Title.Text = "seed 000: tx 64 B pps vs kick threshold"
	p.X.Label.Text = "frames per notify decision (kick=N)"
	p.Y.Label.Text = "pps"
	p.Y.Tick.Marker = plotfmt.Ticks{}
	drawn, err := r.sweepLines(p, "kick", "", []System{SysTinyvmm, SysQEMU})
	if err != nil {
		return err
	}
	if !drawn {
		p.Title.Text += " (no data)"
	}
	return plotfmt.SavePNG(p, 16*vg.Centimeter, 10*vg.Centimeter, file)
}

func (r *Report) plotWeights(file string) error {
	p := plot.New()
	p.Title.Text = "seed 002: ping under tx flood vs tinyvmm --tx-weight-pkts (8192 = unlimited)"
	p.X.Label.Text = "tx weight (packets)"
	p.Y.Label.Text = "us"
	drawn := false
	for _, d := range []string{"avg_us", "p99_us"} {
		ok, err := r.sweepLines(p, "weight", d, []System{SysTinyvmm})
		if err != nil {
			return err
		}
		drawn = drawn || ok
	}
	if !drawn {
		p.Title.Text += " (no data: " + r.Systems[SysTinyvmm].Skip + ")"
	}
	p.Y.Tick.Marker = plotfmt.Ticks{}
	return plotfmt.SavePNG(p, 16*vg.Centimeter, 10*vg.Centimeter, file)
}
