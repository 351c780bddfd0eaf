// Package plotfmt is what the benchmarks' plots share: axis labels in
// thousands ("500k" rather than "500000.00") and the legend drawn beside
// the data instead of over it.
package plotfmt

import (
	"bytes"
	"io"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Short writes v with k for thousands and M for millions: 500000 is
// "500k", 1500000 "1.5M", 2.5 "2.5".
func Short(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(round(v/1e6), 'f', -1, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(round(v/1e3), 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(round(v), 'f', -1, 64)
}

// round keeps 3 significant digits, enough for a tick and free of
// binary-fraction noise (0.30000000000000004).
func round(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return f
}

// Ticks is plot.DefaultTicks with its labels written by Short.
type Ticks struct{}

// Ticks implements plot.Ticker.
func (Ticks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = Short(ts[i].Value)
		}
	}
	return ts
}

// legendGap is the space between the plot and the legend beside it.
const legendGap = 3 * vg.Millimeter

// Draw draws p into c with its legend in a column to the right of the
// plot, top-aligned with the data area, so that no entry covers data.
func Draw(p *plot.Plot, c draw.Canvas) {
	leg := p.Legend
	r := leg.Rectangle(c)
	w := r.Max.X - r.Min.X
	if w <= 0 { // no entries
		p.Draw(c)
		return
	}
	p.Legend = plot.NewLegend() // empty: p.Draw draws no legend
	p.Draw(plotArea(c, w))
	p.Legend = leg
	leg.Top, leg.Left, leg.XOffs, leg.YOffs = true, true, 0, 0
	leg.Draw(legendArea(p, c, w))
}

// plotArea is the part of c left to the plot beside a legend w wide.
func plotArea(c draw.Canvas, w vg.Length) draw.Canvas {
	return draw.Crop(c, 0, -(w + legendGap), 0, 0)
}

// legendArea is the column of c, w wide, that holds the legend: at the
// right edge, below the title.
func legendArea(p *plot.Plot, c draw.Canvas, w vg.Length) draw.Canvas {
	col := draw.Crop(c, c.Size().X-w, 0, 0, 0)
	if p.Title.Text != "" {
		col.Max.Y -= p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	}
	return col
}

// SavePNG draws p as Draw does into a w x h PNG file.
func SavePNG(p *plot.Plot, w, h vg.Length, path string) error {
	img := vgimg.New(w, h)
	Draw(p, draw.New(img))
	return WritePNG(img, path)
}

// PNG draws p as Draw does into a w x h PNG at dpi dots per inch and
// returns its bytes (for a data: URI in a page).
func PNG(p *plot.Plot, w, h vg.Length, dpi int) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	Draw(p, draw.New(img))
	var b bytes.Buffer
	err := EncodePNG(img, &b)
	return b.Bytes(), err
}

// EncodePNG writes a drawn canvas to w as PNG.
func EncodePNG(img *vgimg.Canvas, w io.Writer) error {
	_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
	return err
}

// WritePNG writes a drawn canvas to path as PNG.
func WritePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := EncodePNG(img, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
