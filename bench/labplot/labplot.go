// Package labplot draws the lab's charts (bench e2e, bench boot) into PNG
// files with gonum/plot. A chart is described with plotfmt's types, the
// same ones the product's charts use; only the drawing differs.
//
// gonum/plot parses its embedded fonts at package init, in every process
// that links it. That is why the tinyvmm binary draws its few charts with
// plotfmt's small SVG writer and only the lab command links this package.
package labplot

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"tinyvmm/internal/plotfmt"
)

// dpi makes a chart of w x h vg lengths (px) come out as w x h pixels.
const dpi = 96

// px is n pixels as a vg length at dpi.
func px(n int) vg.Length { return vg.Length(n) * vg.Inch / dpi }

// SavePNG draws c into a PNG file of w x h pixels at path.
func SavePNG(path string, w, h int, c *plotfmt.Chart) error {
	img := vgimg.NewWith(vgimg.UseWH(px(w), px(h)), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	if err := Draw(draw.New(img), c); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Draw draws c onto dc: the title on top, the legend in a column right of
// the data so it covers none of it, the y axis from zero to a round tick
// labelled in thousands (plotfmt.Short).
func Draw(dc draw.Canvas, c *plotfmt.Chart) error {
	dc = draw.Crop(dc, px(8), -px(8), px(8), -px(8))
	p, legend, bars, err := build(c)
	if err != nil {
		return err
	}
	p.Title.Text = wrap(c.Title, p.Title.TextStyle, dc.Max.X-dc.Min.X)
	if legend != nil {
		lw := legendWidth(legend, c)
		col := draw.Crop(dc, dc.Max.X-dc.Min.X-lw, 0, 0, 0)
		col.Max.Y -= p.Title.TextStyle.Height(p.Title.Text) + p.Title.Padding
		legend.Draw(col)
		dc = draw.Crop(dc, 0, -lw-px(8), 0, 0)
	}
	// Categories are 1 apart on the x axis, from -0.5 to n-0.5, so a
	// category's slot is the data area's width over n; the bars (whose
	// width gonum takes in vg lengths) get 80% of it side by side, or a
	// third stacked.
	if n := len(c.Categories); n > 0 && len(c.Bars) > 0 {
		da := p.DataCanvas(dc)
		slot := (da.Max.X - da.Min.X) / vg.Length(n)
		setBarWidths(bars, c.Stacked, slot)
	}
	p.Draw(dc)
	return nil
}

func legendWidth(l *plot.Legend, c *plotfmt.Chart) vg.Length {
	var w vg.Length
	for _, s := range append(append([]plotfmt.Series{}, c.Bars...), c.Lines...) {
		w = max(w, l.TextStyle.Width(s.Name))
	}
	return w + l.ThumbnailWidth + l.TextStyle.Width(" ")
}

// build makes the plot of c, its legend (nil when c names no series) and
// its bar series.
func build(c *plotfmt.Chart) (*plot.Plot, *plot.Legend, []*plotter.BarChart, error) {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = c.XLabel, c.YLabel
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(plotfmt.Ticks(lo, hi)) })
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = p.X.Label.TextStyle.Font.Size
	legend.Padding = px(4)
	entries := 0

	var bs []*plotter.BarChart
	for k, s := range c.Bars {
		bars, err := plotter.NewBarChart(plotter.Values(pad(s.Y, len(c.Categories))), 1)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("labplot: %s: %v", s.Name, err)
		}
		bars.Color = plotfmt.Palette[k%len(plotfmt.Palette)]
		bars.LineStyle.Width = 0
		if c.Stacked && k > 0 {
			bars.StackOn(bs[k-1])
		}
		bs = append(bs, bars)
		p.Add(bars)
		legend.Add(s.Name, bars)
		entries++
	}
	numeric := false
	for i, s := range c.Lines {
		xys := make(plotter.XYs, 0, len(s.Y))
		for j, v := range s.Y {
			switch {
			case s.X == nil:
				xys = append(xys, plotter.XY{X: float64(j), Y: v})
			case j < len(s.X):
				xys = append(xys, plotter.XY{X: s.X[j], Y: v})
				numeric = true
			}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("labplot: %s: %v", s.Name, err)
		}
		col := plotfmt.Palette[(len(c.Bars)+i)%len(plotfmt.Palette)]
		l.Color, pts.Color = col, col
		l.Width = vg.Points(1.5)
		pts.Shape = draw.CircleGlyph{}
		p.Add(l, pts)
		legend.Add(s.Name, l, pts)
		entries++
	}
	switch {
	case numeric:
		p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(plotfmt.Ticks(lo, hi)) })
		if len(c.XTicks) > 0 {
			var ts []plot.Tick
			for _, x := range c.XTicks {
				ts = append(ts, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
			}
			p.X.Tick.Marker = plot.ConstantTicks(ts)
		}
		if c.LogX && p.X.Min > 0 && p.X.Max > p.X.Min {
			p.X.Scale = plot.LogScale{}
		}
	case len(c.Categories) > 0:
		p.NominalX(c.Categories...)
		p.X.Min, p.X.Max = -0.5, float64(len(c.Categories))-0.5
	}
	// Values from zero up, to a round tick above the highest.
	p.Y.Min = min(p.Y.Min, 0)
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	if ts := plotfmt.Ticks(p.Y.Min, p.Y.Max); len(ts) > 1 {
		step := ts[1].Value - ts[0].Value
		p.Y.Max = math.Ceil(p.Y.Max/step-1e-9) * step
	}
	if entries == 0 {
		return p, nil, bs, nil
	}
	return p, &legend, bs, nil
}

// setBarWidths gives each bar series its share of a category's slot (vg
// lengths) and, side by side, its offset from the category's centre.
func setBarWidths(bars []*plotter.BarChart, stacked bool, slot vg.Length) {
	n := vg.Length(len(bars))
	w := slot * 0.8 / n
	if stacked {
		w = slot / 3
	}
	for k, b := range bars {
		b.Width = w
		if !stacked {
			b.Offset = (vg.Length(k) - (n-1)/2) * w
		}
	}
}

func ticks(ts []plotfmt.Tick) []plot.Tick {
	out := make([]plot.Tick, len(ts))
	for i, t := range ts {
		out[i] = plot.Tick{Value: t.Value, Label: t.Label}
	}
	return out
}

// pad gives a bar series one value per category (a missing one is 0).
func pad(y []float64, n int) []float64 {
	if len(y) >= n {
		return y
	}
	return append(append([]float64{}, y...), make([]float64, n-len(y))...)
}

// wrap breaks s at spaces into lines no wider than width in style sty.
func wrap(s string, sty text.Style, width vg.Length) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case sty.Width(line+" "+word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
