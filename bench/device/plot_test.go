package device

import (
	"slices"
	"testing"

	"gonum.org/v1/plot"
)

// The frames/s axes read in thousands ("500k"), not "500000".
func TestPlotAxesInThousands(t *testing.T) {
	r := &Results{
		Seed004: []BatchRow{{Backend: "tap", Batch: 1, PPS: 300e3}, {Backend: "tap", Batch: 64, PPS: 900e3}},
		Seed000: []ThresholdRow{{Threshold: 1, PPS: 200e3}, {Threshold: 8, PPS: 1.1e6}},
	}
	for name, mk := range map[string]func(*Results) (*plot.Plot, error){"004": plotSeed004, "000": plotSeed000} {
		p, err := mk(r)
		if err != nil {
			t.Fatal(err)
		}
		var labels []string
		for _, tk := range p.Y.Tick.Marker.Ticks(0, 1e6) {
			labels = append(labels, tk.Label)
		}
		if !slices.Contains(labels, "500k") {
			t.Errorf("seed %s: y ticks %q, want 500k among them", name, labels)
		}
	}
}
