package plotfmt

import (
	"bytes"
	"image/png"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
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

func TestTicksInThousands(t *testing.T) {
	var labels []string
	for _, tk := range (Ticks{}).Ticks(0, 1.2e6) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	got := strings.Join(labels, " ")
	if got != "0 500k 1M" {
		t.Errorf("ticks over 0..1.2M: %q, want \"0 500k 1M\"", got)
	}
}

// TestLegendBesideData: every legend entry is drawn to the right of every
// line of the plot (its axes and its data, which reaches the top right
// corner), so it covers nothing.
func TestLegendBesideData(t *testing.T) {
	p := plot.New()
	p.Title.Text = "title"
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(l)
	// No thumbnails: the only strokes are then the plot's own.
	p.Legend.Add("first series")
	p.Legend.Add("second")
	before := p.Legend
	rec := &recorder.Canvas{}
	Draw(p, draw.NewCanvas(rec, 12*vg.Centimeter, 8*vg.Centimeter))
	var maxX vg.Length
	var texts []*recorder.FillString
	for _, a := range rec.Actions {
		switch a := a.(type) {
		case *recorder.Stroke:
			for _, pc := range a.Path {
				maxX = max(maxX, pc.Pos.X)
			}
		case *recorder.FillString:
			if a.String == "first series" || a.String == "second" {
				texts = append(texts, a)
			}
		}
	}
	if len(texts) != 2 || maxX == 0 {
		t.Fatalf("drew %d legend entries and lines up to x=%v; want 2 entries and some lines", len(texts), maxX)
	}
	for _, fs := range texts {
		if fs.Point.X <= maxX {
			t.Errorf("legend entry %q at x=%v, over the plot, whose lines reach x=%v", fs.String, fs.Point.X, maxX)
		}
	}
	if p.Legend.Top != before.Top || p.Legend.Left != before.Left {
		t.Error("Draw changed the plot's legend")
	}
}

// PNG's bytes decode as a PNG of the size asked for, with more than one
// colour in it (the plot was drawn, not just the background).
func TestPNGBytes(t *testing.T) {
	p := plot.New()
	p.Title.Text = "t"
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(l)
	b, err := PNG(p, 200, 100, 144)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if sz := img.Bounds().Size(); sz.X != 400 || sz.Y != 200 {
		t.Errorf("image is %v, want 400x200 (200x100 points at 144 dpi)", sz)
	}
	first := img.At(0, 0)
	same := true
	for y := 0; y < img.Bounds().Dy() && same; y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			if img.At(x, y) != first {
				same = false
				break
			}
		}
	}
	if same {
		t.Error("the PNG is one colour")
	}
}
