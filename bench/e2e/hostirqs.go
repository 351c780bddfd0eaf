package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The host's own interrupts on the CPU that runs a VMM's vCPU. With the
// bench guest (which takes no interrupts) nearly every VM exit that is not
// a kick is KVM's irq_exits: an interrupt for the host arrived while the
// guest ran. /proc/interrupts says which: the host's timer (LOC: its tick
// and every hrtimer queued on that CPU, such as a VMM thread's timed sleep),
// a wakeup sent to that CPU (RES), a function call (CAL) or a TLB shootdown
// (TLB, a VMM thread changing the mappings of the process the vCPU runs in).

// hostIRQKinds are the /proc/interrupts rows a run reports, as
// host_irq_<row> in its details.
var hostIRQKinds = []string{"LOC", "RES", "CAL", "TLB"}

// hostIRQs are hostIRQKinds' per-CPU counts.
type hostIRQs map[string][]uint64

// readHostIRQs parses path (/proc/interrupts): a header of CPU names,
// then one row per source, its per-CPU counts after the "NAME:" field.
func readHostIRQs(path string) (hostIRQs, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return nil, fmt.Errorf("%s: empty", path)
	}
	ncpu := len(strings.Fields(sc.Text()))
	want := map[string]bool{}
	for _, k := range hostIRQKinds {
		want[k] = true
	}
	h := hostIRQs{}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 1+ncpu || !want[strings.TrimSuffix(f[0], ":")] {
			continue
		}
		counts := make([]uint64, ncpu)
		for i := range counts {
			v, err := strconv.ParseUint(f[1+i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %v", path, f[0], err)
			}
			counts[i] = v
		}
		h[strings.TrimSuffix(f[0], ":")] = counts
	}
	return h, sc.Err()
}

// onCPU is h - before on cpu, per row both have.
func (h hostIRQs) onCPU(before hostIRQs, cpu int) map[string]uint64 {
	d := map[string]uint64{}
	for k, now := range h {
		b, ok := before[k]
		if !ok || cpu < 0 || cpu >= len(now) || cpu >= len(b) || now[cpu] < b[cpu] {
			continue
		}
		d[k] = now[cpu] - b[cpu]
	}
	return d
}

// vcpuCPU finds the CPU that runs pid's vCPU: the CPU its thread with the
// most guest time last ran on (/proc/PID/task/TID/stat: field 39 is the
// processor, field 43 guest_time). With one vCPU that thread is the vCPU's,
// in tinyvmm and QEMU alike. -1 when no thread ran a guest.
func vcpuCPU(proc string, pid int) (int, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1, err
	}
	cpu, most := -1, uint64(0)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')') // comm may hold spaces and parens
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
		if len(f) < 43-2 {
			continue
		}
		c, err1 := strconv.Atoi(f[39-3])
		g, err2 := strconv.ParseUint(f[43-3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if g > most {
			cpu, most = c, g
		}
	}
	return cpu, nil
}
