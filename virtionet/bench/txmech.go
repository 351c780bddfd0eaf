package bench

import (
	"fmt"
	"time"

	"tinyvmm/virtionet"
)

// TxMechRow is one row of the device tx table: the Go driver floods UDP
// frames of FrameLen bytes to a host socket and the device writes them to
// the tap with one mechanism.
type TxMechRow struct {
	Mechanism        string  `json:"mechanism"`
	IO               string  `json:"io"` // what the device used (uring falls back to writev)
	FrameLen         int     `json:"frame_len"`
	PPS              float64 `json:"tx_pps"`
	NsPerFrame       float64 `json:"worker_cpu_ns_per_frame"`
	FramesPerSyscall float64 `json:"frames_per_syscall"`
}

// txMechanisms are the device's ways of writing tx frames to a tap.
var txMechanisms = []string{"tap writev", "tap io_uring"}

// txMechFrameLens are the frame sizes of the table.
var txMechFrameLens = []int{64, 1514}

// txMechRun measures one mechanism at one frame size for d, with the
// default tuning (groups of NotifyThreshold = 8 chains).
func txMechRun(mech string, frameLen int, d time.Duration) (TxMechRow, error) {
	row := TxMechRow{Mechanism: mech, FrameLen: frameLen}
	io := virtionet.IOWritev
	if mech == txMechanisms[1] {
		io = virtionet.IOUring
	}
	m, err := txRate(io, virtionet.DefaultTuning(), rxFeatures|virtionet.FeatMrgRxBuf, nil, frameLen, d)
	if err != nil {
		return row, err
	}
	if m.queue.Frames == 0 {
		return row, fmt.Errorf("%s: no frames sent", mech)
	}
	row.IO, row.PPS, row.NsPerFrame = m.io, m.pps, m.nsPerFrame
	if m.queue.Syscalls > 0 {
		row.FramesPerSyscall = float64(m.queue.Frames) / float64(m.queue.Syscalls)
	}
	return row, nil
}

// runTxMechs runs every row o.Runs times, interleaved, and keeps medians.
func runTxMechs(o Options, fail func(string, error)) []TxMechRow {
	type key struct {
		mech string
		size int
	}
	var keys []key
	for _, size := range txMechFrameLens {
		for _, m := range txMechanisms {
			keys = append(keys, key{m, size})
		}
	}
	runs := make([][]TxMechRow, len(keys))
	for run := 0; run < o.Runs; run++ {
		for i, k := range keys {
			row, err := txMechRun(k.mech, k.size, o.BackendRun)
			if err != nil {
				fail(fmt.Sprintf("tx %s %d B run %d", k.mech, k.size, run+1), err)
				continue
			}
			runs[i] = append(runs[i], row)
		}
	}
	var rows []TxMechRow
	for i, k := range keys {
		row := TxMechRow{Mechanism: k.mech, FrameLen: k.size}
		if len(runs[i]) > 0 {
			row.IO = runs[i][0].IO
		}
		row.PPS = median(runs[i], func(r TxMechRow) float64 { return r.PPS })
		row.NsPerFrame = median(runs[i], func(r TxMechRow) float64 { return r.NsPerFrame })
		row.FramesPerSyscall = median(runs[i], func(r TxMechRow) float64 { return r.FramesPerSyscall })
		rows = append(rows, row)
	}
	return rows
}

func printTxMechs(o Options, rows []TxMechRow) {
	fmt.Fprintf(o.Out, "Device tx mechanisms on a tap: the Go driver floods UDP to a host socket; the worker writes\n")
	fmt.Fprintf(o.Out, "one writev per frame, or each group of NotifyThreshold (8) chains as WRITEV requests with one\n")
	fmt.Fprintf(o.Out, "io_uring_enter (io=uring; no offloads; %v per run)\n\n", o.BackendRun)
	fmt.Fprintf(o.Out, "%-14s %-7s %6s %12s %16s %16s\n", "mechanism", "io", "frame", "frames/s", "worker ns/frame", "frames/syscall")
	for _, r := range rows {
		fmt.Fprintf(o.Out, "%-14s %-7s %6d %12.0f %16.0f %16.1f\n", r.Mechanism, r.IO, r.FrameLen, r.PPS, r.NsPerFrame, r.FramesPerSyscall)
	}
	fmt.Fprintln(o.Out)
}
