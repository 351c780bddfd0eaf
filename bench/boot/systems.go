package bootbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tinyvmm/vmm"
)

// bootTinyvmm runs tinyvmm (s) with --stats=FILE and takes its
// milestones from there: its timestamps are Unix nanoseconds, on the same
// clock as the spawn time taken here.
func (b *bencher) bootTinyvmm(s System, dir string) Run {
	_, start, run := b.spawn(s, dir)
	if run.Err != "" {
		return run
	}
	raw, err := os.ReadFile(filepath.Join(dir, "stats.json"))
	if err != nil {
		run.Err = err.Error()
		return run
	}
	if err := fillFromStats(&run, raw, start); err != nil {
		run.Err = err.Error()
	}
	return run
}

// fillFromStats takes a run's milestones from tinyvmm's --stats JSON.
func fillFromStats(run *Run, raw []byte, start time.Time) error {
	var st vmm.RunStats
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("tinyvmm --stats: %w", err)
	}
	bs := st.Boot
	if bs == nil || bs.FirstRunUnixNs == 0 || bs.StopUnixNs == 0 {
		return fmt.Errorf("tinyvmm --stats has no boot timestamps")
	}
	if bs.InitUnixNs == 0 {
		return fmt.Errorf("the guest never wrote the boot timer port %#x (an /init from before it?)", vmm.BootTimerPort)
	}
	// tinyvmm enters the kernel's PVH entry point directly: no firmware.
	run.FirstRunS = seconds(unixNs(bs.FirstRunUnixNs), start)
	run.KernelS = run.FirstRunS
	run.InitS = seconds(unixNs(bs.InitUnixNs), start)
	run.ExitS = seconds(unixNs(bs.StopUnixNs), start)
	run.ExitsAtInit = bs.KVMStatsAtInit
	run.PeakRSSKiB, run.GuestKiB = bs.PeakRSSKiBAtInit, bs.GuestTouchedKiBAtInit
	// tinyvmm's steps start at its package init; before that come exec,
	// the Go runtime and the other packages' init, timed from the spawn.
	if bs.ProcessUnixNs != 0 {
		run.Setup = append(run.Setup, vmm.SetupStep{Step: "spawn to package init", Ms: float64(unixNs(bs.ProcessUnixNs).Sub(start).Microseconds()) / 1000})
	}
	run.Setup = append(run.Setup, bs.SetupMs...)
	if bs.Error != "" {
		return fmt.Errorf("tinyvmm's sample at /init: %s", bs.Error)
	}
	return nil
}

// qemuStatus is what isa-debug-exit makes QEMU exit with when the guest
// writes 0: (0 << 1) | 1.
const qemuStatus = 1

// initSample is what the benchmark reads from QEMU when /init starts.
type initSample struct {
	at     time.Time
	exits  map[string]uint64
	hwmKiB int64
	ramKiB int64
	err    error
}

// bootQEMU runs QEMU with the boot timer port on an isa-debugcon whose
// chardev connects to a socket here, and QMP on another; the trace log of
// fw_cfg_select dates the firmware's hand-over to the kernel.
func (b *bencher) bootQEMU(s System, dir string) Run {
	bt, err := net.Listen("unix", filepath.Join(dir, "boottimer.sock"))
	if err != nil {
		return Run{Err: err.Error()}
	}
	defer bt.Close()
	qm, err := net.Listen("unix", filepath.Join(dir, "qmp.sock"))
	if err != nil {
		return Run{Err: err.Error()}
	}
	defer qm.Close()

	argv := b.command(s, dir)
	ctx, cancel := context.WithTimeout(context.Background(), b.o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Run{Err: err.Error()}
	}
	sampled := make(chan initSample, 1)
	go func() { sampled <- b.watchQEMU(ctx, bt, qm, cmd.Process.Pid) }()
	err = cmd.Wait()
	end := time.Now()
	bt.Close() // a watcher still waiting in Accept returns
	qm.Close()
	run := Run{TotalS: end.Sub(start).Seconds()}
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == qemuStatus) {
		run.Err = fmt.Sprintf("%v: %s", err, lastLine(out.String()))
		return run
	}
	if err == nil {
		run.Err = "QEMU exited 0: the guest never wrote its status to isa-debug-exit"
		return run
	}
	smp := <-sampled
	if smp.at.IsZero() {
		run.Err = fmt.Sprintf("no boot timer byte (%v)", smp.err)
		return run
	}
	run.InitS = seconds(smp.at, start)
	run.ExitsAtInit, run.PeakRSSKiB, run.GuestKiB = smp.exits, smp.hwmKiB, smp.ramKiB
	if smp.err != nil {
		run.Err = smp.err.Error()
		return run
	}
	f, err := os.Open(filepath.Join(dir, "trace.log"))
	if err != nil {
		run.Err = err.Error()
		return run
	}
	defer f.Close()
	if t, ok := lastTraceEvent(f, "fw_cfg_select", smp.at); ok {
		run.KernelS = seconds(t, start)
	} else {
		run.Err = "no fw_cfg_select in QEMU's trace log (a QEMU built without the log trace backend?)"
	}
	return run
}

// watchQEMU takes the QMP connection, then waits for the boot timer byte
// and samples QEMU's counters and memory at once.
func (b *bencher) watchQEMU(ctx context.Context, bt, qm net.Listener, pid int) initSample {
	qc, err := qm.Accept()
	if err != nil {
		return initSample{err: fmt.Errorf("QMP: %w", err)}
	}
	defer qc.Close()
	q, err := newQMP(qc)
	if err != nil {
		return initSample{err: err}
	}
	c, err := bt.Accept()
	if err != nil {
		return initSample{err: fmt.Errorf("boot timer: %w", err)}
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(dl)
		qc.SetDeadline(dl)
	}
	var one [1]byte
	if _, err := c.Read(one[:]); err != nil {
		return initSample{err: fmt.Errorf("boot timer: %w", err)}
	}
	smp := initSample{at: time.Now()}
	smp.exits, smp.err = q.vcpuStats()
	var errs []error
	errs = append(errs, smp.err)
	proc := fmt.Sprintf("/proc/%d/", pid)
	if f, err := os.Open(proc + "status"); err == nil {
		smp.hwmKiB, err = statusKiB(f, "VmHWM")
		f.Close()
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	if f, err := os.Open(proc + "smaps"); err == nil {
		smp.ramKiB, err = guestRAMResidentKiB(f, int64(b.o.MemMiB)<<10)
		f.Close()
		errs = append(errs, err)
	} else {
		errs = append(errs, err)
	}
	smp.err = errors.Join(errs...)
	return smp
}

// lastLine is the last non-empty line of a process's output, for errors.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(s, "\r", "")), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// spawn runs s's command (files in dir) to its end, within the timeout,
// and returns its output, the spawn time and a Run with the total, or
// with Err and the output's last line if it failed.
func (b *bencher) spawn(s System, dir string) (string, time.Time, Run) {
	argv := b.command(s, dir)
	ctx, cancel := context.WithTimeout(context.Background(), b.o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	run := Run{TotalS: time.Since(start).Seconds()}
	if err != nil {
		run.Err = fmt.Sprintf("%v: %s", err, lastLine(out.String()))
	}
	return out.String(), start, run
}

// runFloor runs kvmprobe (SysFloor) and takes its first KVM_RUN from the
// stamp line it prints, on the same clock as the spawn time taken here.
func (b *bencher) runFloor() Run {
	out, start, run := b.spawn(SysFloor, "")
	if run.Err != "" {
		return run
	}
	ns, ok := floorStamp(out)
	if !ok {
		run.Err = "kvmprobe printed no first KVM_RUN stamp (one from before -stamp?): " + lastLine(out)
		return run
	}
	run.FirstRunS = seconds(unixNs(ns), start)
	run.Setup = []vmm.SetupStep{{Step: "spawn to first KVM_RUN", Ms: *run.FirstRunS * 1000}}
	return run
}

// floorStamp finds kvmprobe's "KVMPROBE first KVM_RUN unix-ns N" line.
func floorStamp(out string) (int64, bool) {
	const prefix = "KVMPROBE first KVM_RUN unix-ns "
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			ns, err := strconv.ParseInt(v, 10, 64)
			return ns, err == nil && ns > 0
		}
	}
	return 0, false
}
