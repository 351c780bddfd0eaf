package device

import (
	"path/filepath"
	"testing"
)

// Each table becomes its own chart; the missing ones are left out.
func TestPlotCharts(t *testing.T) {
	r := &Results{
		Seed004: []BatchRow{{Backend: "tap", Batch: 1, PPS: 300e3}, {Backend: "tap", Batch: 64, PPS: 900e3}},
		Seed000: []ThresholdRow{{Threshold: 1, PPS: 200e3}, {Threshold: 8, PPS: 1.1e6}},
	}
	if c := plotSeed002(r); c != nil {
		t.Errorf("seed 002 chart without data: %+v", c)
	}
	c := plotSeed004(r)
	if c == nil || len(c.Bars) != 2 || c.Bars[0].Y[0] != 300e3 || c.Bars[1].Y[0] != 900e3 {
		t.Fatalf("seed 004 chart %+v, want batch 1 and 64 bars from the rows", c)
	}
	if c := plotSeed000(r); c == nil || len(c.Lines) != 1 || c.Lines[0].X[1] != 8 || c.Lines[0].Y[1] != 1.1e6 {
		t.Fatalf("seed 000 chart %+v, want the threshold line", c)
	}
	if err := plotResults(r, filepath.Join(t.TempDir(), "d.svg")); err != nil {
		t.Fatal(err)
	}
}
