// Package plotfmt describes the benchmarks' charts (bar charts, grouped or
// stacked over named categories, and line charts over categories or a
// linear or log x axis) and draws the product's few into SVG: the y axis in
// thousands ("500k" rather than "500000") and the legend beside the data
// instead of over it.
//
// The drawing is small on purpose. The tinyvmm binary draws the tour's and
// bench device's charts; a plotting library would link fonts and parse them
// at package init in every tinyvmm process, `run` included. SVG leaves the
// text to the viewer, so this package needs no font at all. The lab command
// draws its charts from the same description with gonum/plot
// (bench/labplot).
package plotfmt

import (
	"bytes"
	"fmt"
	"html"
	"image"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"tinyvmm/internal/textwrap"
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
	black = color.RGBA{A: 255}
	grid  = color.RGBA{R: 230, G: 230, B: 230, A: 255}
)

const (
	lineH  = 14 // a line of text: 12 px type and its leading
	charW  = 7.3
	pad    = 8
	swatch = 14 // a legend entry's colour square
)

// textWidth is s's width at 12 px in the viewer's sans-serif, estimated
// from its length (generous: most glyphs are narrower).
func textWidth(s string) int { return int(math.Ceil(float64(len([]rune(s))) * charW)) }

// svg collects a chart's elements.
type svg struct{ b bytes.Buffer }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// text places s with its top at y; anchor is start, middle or end.
func (g *svg) text(x, y int, s, anchor string) {
	fmt.Fprintf(&g.b, `<text x="%d" y="%d" text-anchor="%s">%s</text>`+"\n", x, y+lineH-3, anchor, html.EscapeString(s))
}

func (g *svg) rect(r image.Rectangle, c color.RGBA) {
	if r.Empty() {
		return
	}
	fmt.Fprintf(&g.b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", r.Min.X, r.Min.Y, r.Dx(), r.Dy(), hex(c))
}

func (g *svg) polyline(pts []image.Point, c color.RGBA) {
	var ps []string
	for _, p := range pts {
		ps = append(ps, strconv.Itoa(p.X)+","+strconv.Itoa(p.Y))
	}
	fmt.Fprintf(&g.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(ps, " "), hex(c))
}

func (g *svg) dot(p image.Point, c color.RGBA) {
	fmt.Fprintf(&g.b, `<circle cx="%d" cy="%d" r="3.5" fill="%s"/>`+"\n", p.X, p.Y, hex(c))
}

// wrap breaks s at spaces into lines at most w pixels wide (a word wider
// than that gets a line of its own); there is always one line.
func wrap(s string, w int) []string {
	lines := textwrap.Lines(s, func(l string) bool { return textWidth(l) <= w })
	if len(lines) == 0 {
		return []string{""}
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

// draw draws the chart into g within r.
func (c *Chart) draw(g *svg, r image.Rectangle) {
	l := c.Layout(r)
	d := l.Data
	for i, t := range wrap(c.Title, r.Dx()-2*pad) {
		g.text(r.Min.X+r.Dx()/2, r.Min.Y+pad+i*lineH, t, "middle")
	}
	if c.YLabel != "" {
		g.text(r.Min.X+pad, d.Min.Y-lineH-2-4, c.YLabel, "start")
	}
	if c.XLabel != "" {
		g.text(d.Min.X+d.Dx()/2, d.Max.Y+4+lineH+2, c.XLabel, "middle")
	}
	ylo, yhi := c.yRange()
	yAt := func(v float64) int { return d.Max.Y - int(math.Round((v-ylo)/(yhi-ylo)*float64(d.Dy()))) }
	for _, t := range Ticks(ylo, yhi) {
		y := yAt(t.Value)
		g.rect(image.Rect(d.Min.X, y, d.Max.X, y+1), grid)
		g.rect(image.Rect(d.Min.X-4, y, d.Min.X, y+1), black)
		g.text(d.Min.X-6, y-lineH/2, t.Label, "end")
	}
	// Categories: equal slots across the x axis.
	n := max(len(c.Categories), 1)
	slot := float64(d.Dx()) / float64(n)
	catX := func(i int) int { return d.Min.X + int(slot*(float64(i)+0.5)) }
	for i, name := range c.Categories {
		g.text(catX(i), d.Max.Y+4, name, "middle")
	}
	c.drawBars(g, d, slot, catX, yAt)
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
			g.rect(image.Rect(x, d.Max.Y, x+1, d.Max.Y+4), black)
			g.text(x, d.Max.Y+4, t.Label, "middle")
		}
	}
	for i, s := range c.Lines {
		col := colour(len(c.Bars) + i)
		var pts []image.Point
		for j, v := range s.Y {
			switch {
			case s.X != nil && j < len(s.X):
				pts = append(pts, image.Pt(xAt(s.X[j]), yAt(v)))
			case s.X == nil:
				pts = append(pts, image.Pt(catX(j), yAt(v)))
			}
		}
		if len(pts) > 1 {
			g.polyline(pts, col)
		}
		for _, p := range pts {
			g.dot(p, col)
		}
	}
	// The axes, over the data's edges.
	g.rect(image.Rect(d.Min.X-1, d.Min.Y, d.Min.X, d.Max.Y+1), black)
	g.rect(image.Rect(d.Min.X-1, d.Max.Y, d.Max.X, d.Max.Y+1), black)
	for i, s := range c.entries() {
		y := l.Legend.Min.Y + i*(lineH+6)
		g.rect(image.Rect(l.Legend.Min.X, y, l.Legend.Min.X+swatch, y+swatch-2), colour(i))
		g.text(l.Legend.Min.X+swatch+4, y-1, s.Name, "start")
	}
}

// drawBars draws each category's bars side by side in 80% of its slot,
// or stacked in a third of it.
func (c *Chart) drawBars(g *svg, d image.Rectangle, slot float64, catX func(int) int, yAt func(float64) int) {
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
			g.rect(image.Rect(x0, y0, x0+w-1, y1), colour(k))
		}
	}
}

// SVG draws the charts side by side, each w x h pixels, as one SVG
// element (for a file, or inline in an HTML page). It scales with the
// width it is given (viewBox); text is the viewer's sans-serif.
func SVG(w, h int, charts ...*Chart) []byte {
	var g svg
	total := w * max(len(charts), 1)
	fmt.Fprintf(&g.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		total, h, total, h)
	var titles []string
	for _, c := range charts {
		titles = append(titles, c.Title)
	}
	fmt.Fprintf(&g.b, "<title>%s</title>\n", html.EscapeString(strings.Join(titles, "; ")))
	g.rect(image.Rect(0, 0, total, h), color.RGBA{R: 255, G: 255, B: 255, A: 255})
	for i, c := range charts {
		c.draw(&g, image.Rect(i*w, 0, (i+1)*w, h))
	}
	g.b.WriteString("</svg>\n")
	return g.b.Bytes()
}

// SaveSVG draws the charts side by side, each w x h pixels, into an SVG
// file at path.
func SaveSVG(path string, w, h int, charts ...*Chart) error {
	return os.WriteFile(path, SVG(w, h, charts...), 0o644)
}
