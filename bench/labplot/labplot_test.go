package labplot

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"tinyvmm/internal/plotfmt"
)

// count counts the pixels of img that are exactly c, in r.
func count(img image.Image, r image.Rectangle, c color.RGBA) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				n++
			}
		}
	}
	return n
}

func render(t *testing.T, w, h int, c *plotfmt.Chart) image.Image {
	t.Helper()
	file := filepath.Join(t.TempDir(), "c.png")
	if err := SavePNG(file, w, h, c); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if sz := img.Bounds().Size(); sz != image.Pt(w, h) {
		t.Fatalf("%q is %v pixels, want %dx%d", c.Title, sz, w, h)
	}
	if os.Getenv("LABPLOT_KEEP") != "" {
		os.WriteFile(filepath.Join(os.Getenv("LABPLOT_KEEP"), filepath.Base(t.Name())+".png"), must(os.ReadFile(file)), 0o644)
	}
	return img
}

func must(b []byte, err error) []byte { return b }

// Each series is drawn in its colour, in proportion to its values, and
// the legend sits in a column right of the data: its swatches are the
// only colour there.
func TestBarsSideBySide(t *testing.T) {
	c := &plotfmt.Chart{Title: "bench e2e: frames per second", YLabel: "pps", Categories: []string{"tx 64", "tx 1400", "rx 64"},
		Bars: []plotfmt.Series{{Name: "tinyvmm", Y: []float64{400e3, 300e3, 200e3}}, {Name: "ceiling", Y: []float64{800e3, 600e3, 400e3}}, {Name: "qemu", Y: []float64{0, 0, 0}}}}
	img := render(t, 680, 420, c)
	all := img.Bounds()
	a, b := count(img, all, plotfmt.Palette[0]), count(img, all, plotfmt.Palette[1])
	if a == 0 || b < a*3/2 || b > a*5/2 {
		t.Errorf("pixels: tinyvmm %d, ceiling %d; want the ceiling's about twice", a, b)
	}
	right := image.Rect(all.Max.X-110, 0, all.Max.X, all.Max.Y)
	if n := count(img, right, plotfmt.Palette[2]); n == 0 {
		t.Error("no swatch of the third series in the legend column")
	}
	if n := count(img, right, plotfmt.Palette[1]); n > 400 {
		t.Errorf("%d pixels of the ceiling's colour in the legend column: a bar runs under the legend", n)
	}
}

func TestStackedBars(t *testing.T) {
	c := &plotfmt.Chart{Title: "tinyvmm bench boot: median phases, ms from the VMM's spawn", YLabel: "ms", Stacked: true,
		Categories: []string{"tinyvmm", "qemu-microvm"},
		Bars:       []plotfmt.Series{{Name: "spawn -> kernel entry", Y: []float64{10, 300}}, {Name: "kernel -> /init", Y: []float64{500, 1200}}}}
	img := render(t, 760, 420, c)
	if a, b := count(img, img.Bounds(), plotfmt.Palette[0]), count(img, img.Bounds(), plotfmt.Palette[1]); a == 0 || b < 2*a {
		t.Errorf("pixels: first phase %d, second %d; want both drawn, the second far larger", a, b)
	}
}

func TestLogXLinesAndNoData(t *testing.T) {
	c := &plotfmt.Chart{Title: "seed 002: ping under tx flood vs tinyvmm --tx-weight-pkts (8192 = unlimited), a title long enough to wrap", XLabel: "tx weight", YLabel: "us",
		Lines: []plotfmt.Series{{Name: "tinyvmm avg", X: []float64{16, 256, 8192}, Y: []float64{100, 200, 900}}}, LogX: true, XTicks: []float64{16, 256, 8192}}
	if img := render(t, 600, 380, c); count(img, img.Bounds(), plotfmt.Palette[0]) == 0 {
		t.Error("the line is not drawn")
	}
	render(t, 600, 380, &plotfmt.Chart{Title: "seed 000 (no data)", XLabel: "kick", YLabel: "pps"})
}
