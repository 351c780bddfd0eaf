// Package plotfmt draws the benchmarks' charts into PNG files: bar charts
// (grouped or stacked over named categories) and line charts (over
// categories or a linear or log x axis), with the y axis in thousands
// ("500k" rather than "500000") and the legend beside the data instead of
// over it.
//
// It is small on purpose. The tinyvmm binary used gonum/plot, whose package
// init parses twelve embedded TrueType fonts and builds LaTeX symbol tables
// in every tinyvmm process, `run` included: 11-14 ms of a VM's start under
// nested KVM. This package draws with the fixed 7x13 bitmap font, which
// costs nothing until a chart is drawn.
package plotfmt

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
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

// Series is one named set of values: a bar per category, or a line.
type Series struct {
	Name string
	// Y has one value per point (lines) or per category (bars).
	Y []float64
	// X places a line's points on a numeric x axis; nil puts point i on
	// category i.
	X []float64
}

// Chart is one chart: bars or lines (or both) on one pair of axes.
type Chart struct {
	Title, XLabel, YLabel string
	// Categories name the x positions of bars and of lines without X.
	Categories []string
	Bars       []Series
	// Stacked stacks the bars of a category instead of putting them side
	// by side.
	Stacked bool
	Lines   []Series
	// LogX puts lines with X on a log10 axis; XTicks, when set, are the
	// only x ticks, labelled with their values.
	LogX   bool
	XTicks []float64
}

// Tick is one labelled position on an axis.
type Tick struct {
	Value float64
	Label string
}

// Ticks are about five round values (1, 2 or 5 times a power of ten)
// covering lo..hi, labelled by Short.
func Ticks(lo, hi float64) []Tick {
	if !(hi > lo) {
		return []Tick{{lo, Short(lo)}}
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var ts []Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := round(k*step) + 0 // + 0: no "-0"
		ts = append(ts, Tick{v, Short(v)})
	}
	return ts
}

// Palette is the series' colours, in order (gonum's plotutil colours, which
// the benchmarks' charts had).
var Palette = []color.RGBA{
	{R: 241, G: 90, B: 96, A: 255}, {R: 122, G: 195, B: 106, A: 255}, {R: 90, G: 155, B: 212, A: 255},
	{R: 250, G: 167, B: 91, A: 255}, {R: 158, G: 103, B: 171, A: 255}, {R: 206, G: 112, B: 88, A: 255},
}

func colour(i int) color.RGBA { return Palette[i%len(Palette)] }

var (
	face  = basicfont.Face7x13
	black = color.RGBA{A: 255}
	grid  = color.RGBA{R: 230, G: 230, B: 230, A: 255}
)

const (
	lineH  = 13 // the font's height
	pad    = 8
	swatch = 14 // a legend entry's colour square
)

func textWidth(s string) int { return font.MeasureString(face, s).Ceil() }

// text draws s with its top-left corner at (x, y).
func text(img draw.Image, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y+face.Ascent)}
	d.DrawString(s)
}

func fill(img draw.Image, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// line draws a 2-pixel-wide line from a to b.
func line(img draw.Image, a, b image.Point, c color.Color) {
	dx, dy := b.X-a.X, b.Y-a.Y
	n := max(abs(dx), abs(dy), 1)
	for i := 0; i <= n; i++ {
		x, y := a.X+dx*i/n, a.Y+dy*i/n
		fill(img, image.Rect(x, y, x+2, y+2), c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// wrap breaks s at spaces into lines at most w pixels wide (a word wider
// than that gets a line of its own).
func wrap(s string, w int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case textWidth(line+" "+word) <= w:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// Layout is where a chart's parts go within its rectangle.
type Layout struct {
	// Data is the area inside the axes; Legend the column beside it.
	Data, Legend image.Rectangle
}

// entries are the legend's names: the bars', then the lines'.
func (c *Chart) entries() []Series { return append(append([]Series{}, c.Bars...), c.Lines...) }

// Layout places the title on top, the y tick labels on the left, the x
// labels below and the legend in a column to the right of the data, so
// that no entry covers data.
func (c *Chart) Layout(r image.Rectangle) Layout {
	legendW := 0
	for _, s := range c.entries() {
		legendW = max(legendW, swatch+4+textWidth(s.Name))
	}
	yLabelW := textWidth(c.YLabel)
	for _, t := range Ticks(c.yRange()) {
		yLabelW = max(yLabelW, textWidth(t.Label))
	}
	top := r.Min.Y + pad + len(wrap(c.Title, r.Dx()-2*pad))*lineH + pad
	if c.YLabel != "" {
		top += lineH + 2 // the y label sits above its axis
	}
	bottom := r.Max.Y - pad - lineH - 4 // the x tick labels
	if c.XLabel != "" {
		bottom -= lineH + 2
	}
	right := r.Max.X - pad
	if legendW > 0 {
		right -= legendW + 2*pad
	}
	l := Layout{Data: image.Rect(r.Min.X+pad+yLabelW+6, top, right, bottom)}
	if legendW > 0 {
		l.Legend = image.Rect(right+2*pad, top, r.Max.X-pad, top+len(c.entries())*(lineH+6))
	}
	return l
}

// yRange covers every bar (stacked: the stacks) and every line point, and 0.
func (c *Chart) yRange() (lo, hi float64) {
	for i := range c.Categories {
		stack := 0.0
		for _, s := range c.Bars {
			if i < len(s.Y) {
				if c.Stacked {
					stack += s.Y[i]
					hi = max(hi, stack)
				}
				lo, hi = min(lo, s.Y[i]), max(hi, s.Y[i])
			}
		}
	}
	for _, s := range c.Lines {
		for _, v := range s.Y {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	// End on a tick so the top bar ends inside the axis.
	if ts := Ticks(lo, hi); len(ts) > 1 {
		step := ts[1].Value - ts[0].Value
		hi = round(math.Ceil(hi/step-1e-9) * step)
	}
	return lo, hi
}

// xRange is the numeric x axis of lines with X.
func (c *Chart) xRange() (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.Lines {
		for _, x := range s.X {
			lo, hi = min(lo, x), max(hi, x)
		}
	}
	if lo > hi {
		return 0, 0, false
	}
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	return lo, hi, true
}

// Draw draws the chart into img within r.
func (c *Chart) Draw(img draw.Image, r image.Rectangle) {
	l := c.Layout(r)
	d := l.Data
	for i, t := range wrap(c.Title, r.Dx()-2*pad) {
		text(img, r.Min.X+max(pad, (r.Dx()-textWidth(t))/2), r.Min.Y+pad+i*lineH, t, black)
	}
	if c.YLabel != "" {
		text(img, r.Min.X+pad, d.Min.Y-lineH-2-4, c.YLabel, black)
	}
	if c.XLabel != "" {
		text(img, d.Min.X+(d.Dx()-textWidth(c.XLabel))/2, d.Max.Y+4+lineH+2, c.XLabel, black)
	}
	ylo, yhi := c.yRange()
	yAt := func(v float64) int { return d.Max.Y - int(math.Round((v-ylo)/(yhi-ylo)*float64(d.Dy()))) }
	for _, t := range Ticks(ylo, yhi) {
		y := yAt(t.Value)
		fill(img, image.Rect(d.Min.X, y, d.Max.X, y+1), grid)
		fill(img, image.Rect(d.Min.X-4, y, d.Min.X, y+1), black)
		text(img, d.Min.X-6-textWidth(t.Label), y-lineH/2, t.Label, black)
	}
	// Categories: equal slots across the x axis.
	n := max(len(c.Categories), 1)
	slot := float64(d.Dx()) / float64(n)
	catX := func(i int) int { return d.Min.X + int(slot*(float64(i)+0.5)) }
	for i, name := range c.Categories {
		text(img, catX(i)-textWidth(name)/2, d.Max.Y+4, name, black)
	}
	c.drawBars(img, d, slot, catX, yAt)
	xlo, xhi, numeric := c.xRange()
	xAt := func(v float64) int {
		f := (v - xlo) / (xhi - xlo)
		if c.LogX && xlo > 0 {
			f = math.Log10(v/xlo) / math.Log10(xhi/xlo)
		}
		return d.Min.X + int(math.Round(f*float64(d.Dx()-1)))
	}
	if numeric {
		ticks := make([]Tick, 0, len(c.XTicks))
		for _, x := range c.XTicks {
			ticks = append(ticks, Tick{x, strconv.FormatFloat(x, 'f', -1, 64)})
		}
		if len(ticks) == 0 {
			ticks = Ticks(xlo, xhi)
		}
		for _, t := range ticks {
			if t.Value < xlo || t.Value > xhi {
				continue
			}
			x := xAt(t.Value)
			fill(img, image.Rect(x, d.Max.Y, x+1, d.Max.Y+4), black)
			text(img, x-textWidth(t.Label)/2, d.Max.Y+4, t.Label, black)
		}
	}
	for i, s := range c.Lines {
		col := colour(len(c.Bars) + i)
		var prev image.Point
		for j, v := range s.Y {
			var p image.Point
			switch {
			case s.X != nil && j < len(s.X):
				p = image.Pt(xAt(s.X[j]), yAt(v))
			case s.X == nil:
				p = image.Pt(catX(j), yAt(v))
			default:
				continue
			}
			if j > 0 {
				line(img, prev, p, col)
			}
			fill(img, image.Rect(p.X-3, p.Y-3, p.X+4, p.Y+4), col)
			prev = p
		}
	}
	// The axes, over the data's edges.
	fill(img, image.Rect(d.Min.X-1, d.Min.Y, d.Min.X, d.Max.Y+1), black)
	fill(img, image.Rect(d.Min.X-1, d.Max.Y, d.Max.X, d.Max.Y+1), black)
	for i, s := range c.entries() {
		y := l.Legend.Min.Y + i*(lineH+6)
		fill(img, image.Rect(l.Legend.Min.X, y, l.Legend.Min.X+swatch, y+swatch-2), colour(i))
		text(img, l.Legend.Min.X+swatch+4, y, s.Name, black)
	}
}

// drawBars draws each category's bars side by side in 80% of its slot,
// or stacked in a third of it.
func (c *Chart) drawBars(img draw.Image, d image.Rectangle, slot float64, catX func(int) int, yAt func(float64) int) {
	if len(c.Bars) == 0 {
		return
	}
	w := int(slot * 0.8 / float64(len(c.Bars)))
	if c.Stacked {
		w = int(slot / 3)
	}
	w = max(w, 1)
	for i := range c.Categories {
		base := 0.0
		for k, s := range c.Bars {
			if i >= len(s.Y) {
				continue
			}
			x0 := catX(i) - w/2
			lo, hi := 0.0, s.Y[i]
			if c.Stacked {
				lo, hi = base, base+s.Y[i]
				base = hi
			} else {
				x0 = catX(i) - w*len(c.Bars)/2 + k*w
			}
			y0, y1 := yAt(max(lo, hi)), yAt(min(lo, hi))
			fill(img, image.Rect(x0, y0, x0+w-1, y1), colour(k))
		}
	}
}

// render draws the charts side by side, each w x h pixels.
func render(w, h int, charts []*Chart) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w*max(len(charts), 1), h))
	fill(img, img.Bounds(), color.White)
	for i, c := range charts {
		c.Draw(img, image.Rect(i*w, 0, (i+1)*w, h))
	}
	return img
}

// PNG draws the charts side by side, each w x h pixels, and returns the
// PNG's bytes (for a data: URI in a page).
func PNG(w, h int, charts ...*Chart) ([]byte, error) {
	var b bytes.Buffer
	err := png.Encode(&b, render(w, h, charts))
	return b.Bytes(), err
}

// SavePNG draws the charts side by side, each w x h pixels, into a PNG
// file at path.
func SavePNG(path string, w, h int, charts ...*Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, render(w, h, charts)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
