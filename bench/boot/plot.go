package bootbench

import (
	"tinyvmm/internal/plotfmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot draws boot.png: one stacked bar per system, its median phases in
// milliseconds (spawn to kernel entry, kernel to /init, /init to the
// guest's exit, exit to the process reaped).
func (r *Report) Plot(file string) error {
	p := plot.New()
	p.Title.Text = "tinyvmm bench boot: median phases, ms from the VMM's spawn"
	p.Y.Label.Text = "ms"
	p.Y.Tick.Marker = plotfmt.Ticks{}
	labels := []string{"spawn -> kernel entry", "kernel -> /init", "/init -> guest exit", "exit -> reaped"}
	var names []string
	for _, s := range r.Systems {
		names = append(names, string(s.System))
	}
	var below *plotter.BarChart
	for i, ph := range phases {
		vals := make(plotter.Values, len(r.Systems))
		for j, s := range r.Systems {
			vals[j] = s.PhaseMedianS[ph] * 1000
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(40))
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		p.Legend.Add(labels[i], bars)
	}
	p.NominalX(names...)
	return plotfmt.SavePNG(p, 20*vg.Centimeter, 11*vg.Centimeter, file)
}
