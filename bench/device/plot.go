package device

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"tinyvmm/internal/plotfmt"
)

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
)

// Plots returns a plot of each of the three seed tables that r holds, in
// the order 002, 004, 000 (the tour draws them one by one).
func Plots(r *Results) ([]*plot.Plot, error) {
	var ps []*plot.Plot
	for _, mk := range []func(*Results) (*plot.Plot, error){plotSeed002, plotSeed004, plotSeed000} {
		p, err := mk(r)
		if err != nil {
			return nil, err
		}
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// plotResults draws the three tables side by side into a PNG.
func plotResults(r *Results, path string) error {
	row, err := Plots(r)
	if err != nil {
		return err
	}
	if len(row) == 0 {
		return nil
	}
	img := vgimg.New(vg.Points(float64(380*len(row))), vg.Points(320))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		plotfmt.Draw(p, canvases[0][i]) // the legend beside the data
	}
	return plotfmt.WritePNG(img, path)
}

func line(p *plot.Plot, xys plotter.XYs, c color.Color, name string) error {
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, s.Color = c, c
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

func plotSeed002(r *Results) (*plot.Plot, error) {
	if len(r.Seed002) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Seed 002: latency under a 1-byte UDP flood"
	p.X.Label.Text = "tx packet weight"
	p.Y.Label.Text = "request latency (ms)"
	var avg, p99 plotter.XYs
	var names []string
	for i, row := range r.Seed002 {
		avg = append(avg, plotter.XY{X: float64(i), Y: row.AvgMs})
		p99 = append(p99, plotter.XY{X: float64(i), Y: row.P99Ms})
		names = append(names, weightName(row.Weight))
	}
	if err := line(p, avg, blue, "avg"); err != nil {
		return nil, err
	}
	if err := line(p, p99, orange, "p99"); err != nil {
		return nil, err
	}
	p.NominalX(names...)
	return p, nil
}

func plotSeed004(r *Results) (*plot.Plot, error) {
	if len(r.Seed004) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Seed 004: rx batch 1 vs 64"
	p.Y.Label.Text = "rx frames/s"
	var one, many plotter.Values
	var names []string
	for _, key := range []struct {
		be  string
		mrg bool
	}{{"tap", false}, {"tap", true}, {"af_packet", false}, {"af_packet", true}} {
		name := key.be + " small"
		if key.mrg {
			name = key.be + " mrg"
		}
		names = append(names, name)
		for _, row := range r.Seed004 {
			if row.Mergeable != key.mrg || row.Backend != key.be {
				continue
			}
			if row.Batch == 1 {
				one = append(one, row.PPS)
			} else {
				many = append(many, row.PPS)
			}
		}
	}
	w := vg.Points(18)
	b1, err := plotter.NewBarChart(one, w)
	if err != nil {
		return nil, err
	}
	b64, err := plotter.NewBarChart(many, w)
	if err != nil {
		return nil, err
	}
	b1.Color, b64.Color = blue, orange
	b1.Offset, b64.Offset = -w/2, w/2
	p.Add(b1, b64)
	p.Legend.Add("batch 1", b1)
	p.Legend.Add("batch 64", b64)
	p.Y.Tick.Marker = plotfmt.Ticks{}
	p.NominalX(names...)
	return p, nil
}

func plotSeed000(r *Results) (*plot.Plot, error) {
	if len(r.Seed000) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Seed 000: notification threshold"
	p.X.Label.Text = "threshold (chains per used publish)"
	p.Y.Label.Text = "tx frames/s"
	var xys plotter.XYs
	for _, row := range r.Seed000 {
		xys = append(xys, plotter.XY{X: float64(row.Threshold), Y: row.PPS})
	}
	if err := line(p, xys, blue, "tx pps"); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	p.Y.Tick.Marker = plotfmt.Ticks{}
	return p, nil
}
