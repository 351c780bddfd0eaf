package plotfmt

import (
	"bytes"
	"encoding/xml"
	"image"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestShort(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 2.5: "2.5", 0.30000000000000004: "0.3", 999: "999",
		1000: "1k", 500000: "500k", 1250: "1.25k", 1e6: "1M", 1.5e6: "1.5M", -2000: "-2k",
	} {
		if got := Short(v); got != want {
			t.Errorf("Short(%v) = %q, want %q", v, got, want)
		}
	}
}

func labels(ts []Tick) string {
	var l []string
	for _, tk := range ts {
		l = append(l, tk.Label)
	}
	return strings.Join(l, " ")
}

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 1.2e6, "0 200k 400k 600k 800k 1M 1.2M"},
		{0, 7, "0 2 4 6"},
		{0, 0.3, "0 0.05 0.1 0.15 0.2 0.25 0.3"},
		{0, 9000, "0 2k 4k 6k 8k"},
		{5, 5, "5"},
	} {
		if got := labels(Ticks(c.lo, c.hi)); got != c.want {
			t.Errorf("Ticks(%v, %v) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}

// The y axis ends on a tick at or above the tallest stack.
func TestYRangeCoversStacks(t *testing.T) {
	c := &Chart{Categories: []string{"a", "b"}, Stacked: true,
		Bars: []Series{{Name: "x", Y: []float64{100, 2000}}, {Name: "y", Y: []float64{50, 1500}}}}
	lo, hi := c.yRange()
	if lo != 0 || hi < 3500 || hi > 4000 {
		t.Errorf("stacked y range %v..%v, want 0..3500-4000", lo, hi)
	}
	c.Stacked = false
	if _, hi := c.yRange(); hi < 2000 || hi > 2500 {
		t.Errorf("side-by-side y range up to %v, want 2000-2500", hi)
	}
}

// The legend is a column right of the data area, so it covers nothing, and
// every part stays inside the chart's rectangle.
func TestLegendBesideData(t *testing.T) {
	c := &Chart{Title: "title", YLabel: "pps", XLabel: "x",
		Lines: []Series{{Name: "first series", X: []float64{1, 2}, Y: []float64{0, 1e6}}, {Name: "second", X: []float64{1, 2}, Y: []float64{5, 6}}}}
	r := image.Rect(100, 0, 600, 400)
	l := c.Layout(r)
	if l.Legend.Empty() || l.Data.Empty() {
		t.Fatalf("layout %+v: want a data area and a legend", l)
	}
	if l.Legend.Min.X <= l.Data.Max.X {
		t.Errorf("legend at x=%d, over the data, which reaches x=%d", l.Legend.Min.X, l.Data.Max.X)
	}
	if !l.Data.In(r) || !l.Legend.In(r) {
		t.Errorf("layout %+v leaves the chart's %v", l, r)
	}
	if l := (&Chart{Title: "no legend"}).Layout(r); !l.Legend.Empty() {
		t.Errorf("a chart without series has a legend %v", l.Legend)
	}
}

// svgElem is an SVG element as encoding/xml reads it, with its children.
type svgElem struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Kids    []svgElem  `xml:",any"`
}

func (e svgElem) attr(name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// SVG draws the charts side by side, each in its half, with its series'
// colours, as well-formed SVG whose text is escaped.
func TestSVG(t *testing.T) {
	bars := &Chart{Title: "bars <&>", Categories: []string{"a", "b"}, Bars: []Series{{Name: "one", Y: []float64{1, 2}}}}
	lines := &Chart{Title: "lines", LogX: true, XTicks: []float64{1, 10, 100},
		Lines: []Series{{Name: "l", X: []float64{1, 10, 100}, Y: []float64{3, 2, 1}}}}
	raw := SVG(300, 200, bars, lines)
	var root svgElem
	if err := xml.Unmarshal(raw, &root); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, raw)
	}
	if root.XMLName.Local != "svg" || root.attr("width") != "600" || root.attr("height") != "200" || root.attr("viewBox") != "0 0 600 200" {
		t.Fatalf("root %v %v, want a 600x200 svg", root.XMLName, root.Attrs)
	}
	colour := hex(Palette[0])
	var barsLeft, barHeights []float64
	var lineRight, texts int
	for _, e := range root.Kids {
		switch {
		case e.XMLName.Local == "rect" && e.attr("fill") == colour && num(t, e.attr("height")) > 12:
			barsLeft = append(barsLeft, num(t, e.attr("x")))
			barHeights = append(barHeights, num(t, e.attr("height")))
		case e.XMLName.Local == "polyline" && e.attr("stroke") == colour:
			for _, p := range strings.Fields(e.attr("points")) {
				if x := num(t, strings.Split(p, ",")[0]); x >= 300 {
					lineRight++
				}
			}
		case e.XMLName.Local == "text" && e.Text == "bars <&>":
			texts++
		}
	}
	if len(barsLeft) != 2 || barsLeft[0] >= 300 || barsLeft[1] >= 300 || barHeights[1] < 1.9*barHeights[0] || barHeights[1] > 2.1*barHeights[0] {
		t.Errorf("bars at x %v, heights %v: want two in the left half, the second twice the first", barsLeft, barHeights)
	}
	if lineRight != 3 {
		t.Errorf("%d of the line's points in the right half, want 3", lineRight)
	}
	if texts != 1 {
		t.Errorf("the title (with <&>) is in %d text elements, want 1", texts)
	}
	if err := SaveSVG(filepath.Join(t.TempDir(), "no", "such", "dir.svg"), 10, 10, bars); err == nil {
		t.Error("SaveSVG into a missing directory did not fail")
	}
	file := filepath.Join(t.TempDir(), "c.svg")
	if err := SaveSVG(file, 300, 200, bars, lines); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Equal(b, raw) {
		t.Errorf("SaveSVG wrote %d bytes (%v), not SVG's %d", len(b), err, len(raw))
	}
}

// A title wider than the chart is broken at spaces into lines that fit.
func TestWrapTitle(t *testing.T) {
	long := "seed 002: ping under tx flood vs tinyvmm --tx-weight-pkts (8192 = unlimited)"
	lines := wrap(long, 300)
	if len(lines) < 2 || strings.Join(lines, " ") != long {
		t.Fatalf("wrap: %q", lines)
	}
	for _, l := range lines {
		if textWidth(l) > 300 {
			t.Errorf("line %q is %d px wide, over 300", l, textWidth(l))
		}
	}
	if got := wrap("short", 300); len(got) != 1 || got[0] != "short" {
		t.Errorf("wrap(short) = %q", got)
	}
	if got := wrap("", 300); len(got) != 1 || got[0] != "" {
		t.Errorf("wrap(\"\") = %q", got)
	}
	c := &Chart{Title: long, Lines: []Series{{Name: "l", X: []float64{1, 2}, Y: []float64{1, 2}}}}
	one := (&Chart{Title: "short", Lines: c.Lines}).Layout(image.Rect(0, 0, 400, 300))
	if l := c.Layout(image.Rect(0, 0, 400, 300)); l.Data.Min.Y <= one.Data.Min.Y {
		t.Errorf("a two-line title leaves the data at y=%d, as high as a one-line title's %d", l.Data.Min.Y, one.Data.Min.Y)
	}
}
