package device

import (
	"fmt"
	"time"

	"tinyvmm/virtionet"
)

// DevMechRow is one row of the device mechanism table: frames of FrameLen
// bytes through the device on a tap in one direction, moved with one
// system call per frame (writev, readv) or in batches through io_uring.
type DevMechRow struct {
	Direction        string  `json:"direction"` // "tx" or "rx"
	Mechanism        string  `json:"mechanism"`
	IO               string  `json:"io"` // what the device used for tx (uring falls back to writev)
	FrameLen         int     `json:"frame_len"`
	PPS              float64 `json:"pps"`
	NsPerFrame       float64 `json:"worker_cpu_ns_per_frame"`
	FramesPerSyscall float64 `json:"frames_per_syscall"`
}

// devMechanisms are the device's ways of moving frames on a tap: the
// Config.IO of each.
var devMechanisms = []struct {
	name string
	io   virtionet.IOMode
}{
	{"tap, 1 per syscall", virtionet.IOWritev},
	{"tap + io_uring", virtionet.IOUring},
}

// devMechFrameLens are the frame sizes of the table.
var devMechFrameLens = []int{64, 1514}

// devMechRun measures one mechanism in one direction at one frame size for
// d, with the default tuning (tx groups of up to TxYieldPkts = 64 chains, rx
// batches of 64) and no checksum or TSO offloads, so that each 2048-byte
// rx buffer holds a whole frame. tx: the Go driver floods UDP to a host
// socket; rx: an AF_PACKET sender on the host side floods the guest.
func devMechRun(dir string, mech int, frameLen int, d time.Duration) (DevMechRow, error) {
	m := devMechanisms[mech]
	row := DevMechRow{Direction: dir, Mechanism: m.name, FrameLen: frameLen}
	feat := uint64(rxFeatures | virtionet.FeatMrgRxBuf)
	var r rate
	var err error
	if dir == "tx" {
		r, err = txRate(m.io, virtionet.DefaultTuning(), feat, nil, frameLen, d)
	} else {
		r, err = rxRate(false, m.io, virtionet.DefaultTuning(), feat, frameLen, d)
	}
	if err != nil {
		return row, err
	}
	if r.queue.Frames == 0 {
		return row, fmt.Errorf("%s %s: no frames moved", dir, m.name)
	}
	row.IO, row.PPS, row.NsPerFrame = r.io, r.pps, r.nsPerFrame
	if r.queue.Syscalls > 0 {
		row.FramesPerSyscall = float64(r.queue.Frames) / float64(r.queue.Syscalls)
	}
	return row, nil
}

// runDevMechs runs every row o.Runs times, interleaved, and keeps medians.
func runDevMechs(o Options, fail func(string, error)) []DevMechRow {
	type key struct {
		dir  string
		mech int
		size int
	}
	var keys []key
	for _, dir := range []string{"tx", "rx"} {
		for _, size := range devMechFrameLens {
			for m := range devMechanisms {
				keys = append(keys, key{dir, m, size})
			}
		}
	}
	runs := make([][]DevMechRow, len(keys))
	for run := 0; run < o.Runs; run++ {
		for i, k := range keys {
			row, err := devMechRun(k.dir, k.mech, k.size, o.BackendRun)
			if err != nil {
				fail(fmt.Sprintf("%s %s %d B run %d", k.dir, devMechanisms[k.mech].name, k.size, run+1), err)
				continue
			}
			runs[i] = append(runs[i], row)
		}
	}
	var rows []DevMechRow
	for i, k := range keys {
		row := DevMechRow{Direction: k.dir, Mechanism: devMechanisms[k.mech].name, FrameLen: k.size}
		if len(runs[i]) > 0 {
			row.IO = runs[i][0].IO
		}
		row.PPS = median(runs[i], func(r DevMechRow) float64 { return r.PPS })
		row.NsPerFrame = median(runs[i], func(r DevMechRow) float64 { return r.NsPerFrame })
		row.FramesPerSyscall = median(runs[i], func(r DevMechRow) float64 { return r.FramesPerSyscall })
		rows = append(rows, row)
	}
	return rows
}

func printDevMechs(o Options, rows []DevMechRow) {
	fmt.Fprintf(o.Out, "Device on a tap, one system call per frame (writev/readv) vs io_uring (io=uring: a tx group of\n")
	fmt.Fprintf(o.Out, "up to 64 chains per io_uring_enter; rx reads in waves until the tap is empty). tx: the\n")
	fmt.Fprintf(o.Out, "driver floods UDP to a host socket; rx: an AF_PACKET sender floods the guest; no offloads; %v per run\n\n", o.BackendRun)
	fmt.Fprintf(o.Out, "%-4s %-20s %-7s %6s %12s %16s %16s\n", "dir", "mechanism", "io=", "frame", "frames/s", "worker ns/frame", "frames/syscall")
	for _, r := range rows {
		fmt.Fprintf(o.Out, "%-4s %-20s %-7s %6d %12.0f %16.0f %16.1f\n", r.Direction, r.Mechanism, r.IO, r.FrameLen, r.PPS, r.NsPerFrame, r.FramesPerSyscall)
	}
	fmt.Fprintln(o.Out)
}
