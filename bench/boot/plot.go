package bootbench

import (
	"tinyvmm/bench/labplot"
	"tinyvmm/internal/plotfmt"
)

// Plot draws boot.png: one stacked bar per system, its median phases in
// milliseconds (spawn to kernel entry, kernel to /init, /init to the
// guest's exit, exit to the process reaped). The floor boots no kernel
// and has no bar.
func (r *Report) Plot(file string) error {
	c := &plotfmt.Chart{Title: "tinyvmm bench boot: median phases, ms from the VMM's spawn", YLabel: "ms", Stacked: true}
	labels := []string{"spawn -> kernel entry", "kernel -> /init", "/init -> guest exit", "exit -> reaped"}
	var booted []*Result
	for _, s := range r.Systems {
		if s.System != SysFloor {
			booted = append(booted, s)
			c.Categories = append(c.Categories, string(s.System))
		}
	}
	for i, ph := range phases {
		bars := plotfmt.Series{Name: labels[i]}
		for _, s := range booted {
			bars.Y = append(bars.Y, s.PhaseMedianS[ph]*1000)
		}
		c.Bars = append(c.Bars, bars)
	}
	return labplot.SavePNG(file, 760, 420, c)
}
