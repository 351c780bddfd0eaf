package device

import (
	"fmt"
	"strings"
)

func weightName(w int) string {
	if w == 0 {
		return "Origin"
	}
	return fmt.Sprint(w)
}

// LatencyRowName names a seed 002 row: its weight, and the tx yield
// when it has one ("256+y32").
func LatencyRowName(weight, yield int) string {
	if yield > 0 {
		return fmt.Sprintf("%s+y%d", weightName(weight), yield)
	}
	return weightName(weight)
}

func printSeed002(o Options, rows []LatencyRow) {
	fmt.Fprintf(o.Out, "Seed 002: tx packet weight vs request latency while the guest floods 1-byte UDP\n")
	fmt.Fprintf(o.Out, "(host-side UDP echo request every %v to the guest, answered by the driver; %v per run;\n", o.PingEvery, o.LatencyRun)
	fmt.Fprintf(o.Out, " Origin = no packet weight, byte weight 0x80000 only, as before the patch;\n")
	fmt.Fprintf(o.Out, " +yN = a tx run also gives rx its turn when frames wait for the guest, looking every N frames:\n")
	fmt.Fprintf(o.Out, " tinyvmm's default, which vhost-net does not do; the other rows never yield)\n\n")
	fmt.Fprintf(o.Out, "%-8s %8s %8s %8s %8s %12s %8s\n", "Packet#", "min ms", "avg ms", "max ms", "p99 ms", "tx pps", "samples")
	for _, r := range rows {
		fmt.Fprintf(o.Out, "%-8s %8.3f %8.3f %8.3f %8.3f %12.0f %8d\n", LatencyRowName(r.Weight, r.Yield),
			r.MinMs, r.AvgMs, r.MaxMs, r.P99Ms, r.TxPPS, r.Samples)
	}
	fmt.Fprintln(o.Out)
}

func printSeed004(o Options, rows []BatchRow) {
	fmt.Fprintf(o.Out, "Seed 004: rx frames/s, batch 1 vs 64 (64-byte frames from an AF_PACKET sender on the host\n")
	fmt.Fprintf(o.Out, "side of the link; no csum/TSO offloads; %v per run). A tap gives one frame per read; the\n", o.BatchRun)
	fmt.Fprintf(o.Out, "af_packet backend reads a batch per recvmmsg into pre-parsed guest buffers.\n\n")
	fmt.Fprintf(o.Out, "%-10s %-10s %12s %12s %8s %12s %20s %18s\n", "backend", "buffers", "batch 1 pps", "batch 64 pps", "gain",
		"frames/batch", "worker ns/frame 1/64", "ring empty/s 1/64")
	for _, be := range []string{"tap", "af_packet"} {
		for _, mrg := range []bool{false, true} {
			var one, many BatchRow
			for _, r := range rows {
				if r.Backend == be && r.Mergeable == mrg && r.Batch == 1 {
					one = r
				}
				if r.Backend == be && r.Mergeable == mrg && r.Batch == 64 {
					many = r
				}
			}
			name := "small"
			if mrg {
				name = "mergeable"
			}
			gain := 0.0
			if one.PPS > 0 {
				gain = 100 * (many.PPS - one.PPS) / one.PPS
			}
			fmt.Fprintf(o.Out, "%-10s %-10s %12.0f %12.0f %+7.1f%% %12.1f %20s %18s\n", be, name, one.PPS, many.PPS, gain,
				many.FramesPerBatch, fmt.Sprintf("%.0f / %.0f", one.NsPerFrame, many.NsPerFrame),
				fmt.Sprintf("%.0f / %.0f", one.NoBuffersPerS, many.NoBuffersPerS))
		}
	}
	fmt.Fprintln(o.Out)
}

func printSeed000(o Options, rows []ThresholdRow) {
	fmt.Fprintf(o.Out, "Seed 000: tx frames/s by notification threshold (used entries published every N chains,\n")
	fmt.Fprintf(o.Out, "avail_event N-1 ahead during bursts; 64-byte frames the host drops at once; %v per run)\n\n", o.ThresholdRun)
	per := (len(rows) + 2) / 3
	var lines []string
	for i := 0; i < per; i++ {
		var cells []string
		for c := 0; c < 3; c++ {
			if j := c*per + i; j < len(rows) {
				cells = append(cells, fmt.Sprintf("%-4d %9.0f %6.0f", rows[j].Threshold, rows[j].PPS, rows[j].NsPerFrame))
			}
		}
		lines = append(lines, strings.Join(cells, " | "))
	}
	fmt.Fprintf(o.Out, "(ns = worker thread CPU per frame, steadier than PPS on a shared machine)\n")
	h := fmt.Sprintf("%-4s %9s %6s", "thr", "PPS", "ns")
	fmt.Fprintf(o.Out, "%s | %s | %s\n", h, h, h)
	fmt.Fprintln(o.Out, strings.Join(lines, "\n"))
	best, cheapest := ThresholdRow{}, ThresholdRow{}
	for _, r := range rows {
		if r.PPS > best.PPS {
			best = r
		}
		if r.NsPerFrame > 0 && (cheapest.NsPerFrame == 0 || r.NsPerFrame < cheapest.NsPerFrame) {
			cheapest = r
		}
	}
	fmt.Fprintf(o.Out, "highest rate: threshold %d at %.0f frames/s; lowest cost: threshold %d at %.0f ns/frame\n\n",
		best.Threshold, best.PPS, cheapest.Threshold, cheapest.NsPerFrame)
}

func printBackends(o Options, rows []BackendRow) {
	fmt.Fprintf(o.Out, "Backend mechanisms: frames per system call when frames wait (64-byte frames from an\n")
	fmt.Fprintf(o.Out, "AF_PACKET sender; the reader drains, then sleeps 0.5 ms; %v per run)\n\n", o.BackendRun)
	fmt.Fprintf(o.Out, "%-24s %12s %16s %18s\n", "mechanism", "frames/s", "frames/syscall", "reader ns/frame")
	for _, r := range rows {
		fmt.Fprintf(o.Out, "%-24s %12.0f %16.1f %18.0f\n", r.Mechanism, r.PPS, r.FramesPerSyscall, r.NsPerFrame)
	}
	fmt.Fprintln(o.Out)
}

func printPoll(o Options, rows []PollRow) {
	fmt.Fprintf(o.Out, "\nTx poll mode: a 64-byte tx flood by --poll-us (0: off; %v per run). Kicks are\n", o.PollRun)
	fmt.Fprintf(o.Out, "what costs an exit each on a real KVM; ns = worker thread CPU per frame.\n\n")
	fmt.Fprintf(o.Out, "%8s %10s %8s %12s\n", "poll-us", "PPS", "ns", "kicks/frame")
	for _, r := range rows {
		fmt.Fprintf(o.Out, "%8d %10.0f %8.0f %12.4f\n", r.PollUs, r.PPS, r.NsPerFrame, r.KicksPerFrame)
	}
}
