package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/schedstat"
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
	h := hostIRQs{}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 1+ncpu {
			continue
		}
		name := strings.TrimSuffix(f[0], ":")
		if !slices.Contains(hostIRQKinds, name) {
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
		h[name] = counts
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

// vcpuThread finds pid's vCPU thread and the CPU it last ran on
// (/proc/PID/task/TID/stat: field 39 is the processor, field 43
// guest_time): the thread named as a first vCPU (vcpuName), else the one
// with the most guest time, which with one vCPU is the vCPU's. Guest time
// is a sample of the clock tick, so a vCPU that shares its CPU at start
// may have none for a while: the name does not wait for it. tid 0 and
// cpu -1 when no thread has the name or a tick of guest time yet.
func vcpuThread(proc string, pid int) (tid, cpu int, err error) {
	dir := filepath.Join(proc, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, -1, err
	}
	cpu, most := -1, uint64(0)
	for _, e := range ents {
		t, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		th, err := schedstat.ReadThread(filepath.Join(dir, e.Name()))
		if errors.Is(err, schedstat.ErrEnded) {
			continue
		}
		if vcpuName(th.Name) {
			return t, th.CPU, nil
		}
		if th.GuestTicks > most {
			tid, cpu, most = t, th.CPU, th.GuestTicks
		}
	}
	return tid, cpu, nil
}

// vcpuName says whether a thread's name is a first vCPU's: tinyvmm's
// (vmm/vcpu_loop.go) or QEMU's with debug-threads=on.
func vcpuName(name string) bool {
	return name == "vcpu0" || strings.HasPrefix(name, "CPU 0/")
}

// threadSwitches are a process's context switches and CPU time, per
// thread: how often each thread slept (voluntary: each sleep ends in a
// wakeup, somewhere) and was preempted, from /proc/PID/task/TID/status,
// and its CPU time in and out of the guest, from .../stat.
type threadSwitches map[string]threadCounts

type threadCounts struct {
	slept, preempted uint64
	user, sys, guest uint64 // clock ticks (USER_HZ); user includes guest
	// waited: ns runnable but waiting for a CPU (schedstat's second
	// field): how long the thread's wakeups took to turn into running
	waited uint64
	// ran: ns on a CPU (schedstat's first field), guest mode included:
	// exact, where the ticks above are samples
	ran  uint64
	name string // the thread's name (status' Name), vhost-PID as vhost
	// worker: a kernel worker serving the VMM from outside its thread
	// group (vhost-net's, vhost.go)
	worker bool
	// idle: in SCHED_IDLE: it waits for a CPU by design, so its wait is
	// left out; counted as vmm_sched_idle:NAME, since no VMM should
	// have one
	idle bool
}

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every arch
// that runs KVM guests here).
const userHZ = 100

// readThreadSwitches reads the counts of every thread of pid and of the
// kernel workers that serve it from outside its thread group (workers: the
// vhost workers of vhostWorkers), which count as the VMM's threads.
func readThreadSwitches(proc string, pid int, workers ...int) (threadSwitches, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	ts := threadSwitches{}
	for _, e := range ents {
		if c, ok := readThreadCounts(filepath.Join(dir, e.Name())); ok {
			ts[e.Name()] = c
		}
	}
	for _, w := range workers {
		id := strconv.Itoa(w)
		if c, ok := readThreadCounts(filepath.Join(proc, id, "task", id)); ok {
			c.worker = true
			ts[id] = c
		}
	}
	return ts, nil
}

// readThreadCounts reads one thread's directory (/proc/PID/task/TID);
// false when the thread ended.
func readThreadCounts(dir string) (threadCounts, bool) {
	t, err := schedstat.ReadThread(dir)
	if errors.Is(err, schedstat.ErrEnded) {
		return threadCounts{}, false
	}
	c := threadCounts{
		slept: t.Voluntary, preempted: t.Involuntary,
		user: t.UserTicks, sys: t.SystemTicks, guest: t.GuestTicks,
		waited: t.WaitNs, ran: t.RunNs,
		name: t.Name, idle: t.Policy == unix.SCHED_IDLE,
	}
	if strings.HasPrefix(c.name, "vhost-") {
		c.name = "vhost"
	}
	return c, true
}

// since sums t - before over the threads: vmm_wakeups (voluntary
// switches), vmm_preemptions and vmm_threads_woken (threads that slept at
// least once), the wakeups of the thread that woke most (vmm_wakeups_max)
// and of the process's second thread, pid+1 (vmm_wakeups_tid2: in a Go
// program the runtime's sysmon, the first thread it makes; in QEMU its RCU
// thread), the threads in SCHED_IDLE by name (vmm_sched_idle:NAME), and the CPU time in milliseconds the threads spent outside the
// guest (vmm_host_cpu_ms: the device's work and the exits' handling) and
// in it (vmm_guest_cpu_ms). The host part splits into user space
// (vmm_user_cpu_ms) and the kernel (vmm_sys_cpu_ms), and the thread with
// the most of it (in tinyvmm the device's worker) has its own
// (vmm_busiest_user_cpu_ms, vmm_busiest_sys_cpu_ms). Kernel workers that
// serve the VMM (vhost-net's, read with it) count in all of these, and
// their host CPU time is also vmm_worker_cpu_ms. The split is the
// kernel's tick sampling: good to a tick (10 ms) per thread, and biased
// where a thread's work keeps time with the tick (a ping every 10 ms
// against HZ=100). vmm_host_cpu_us (and :NAME) is the same host time from
// schedstat's exact time on a CPU, less the sampled guest time (only a
// vCPU has any): the per-frame figures use it. vmm_ran_us:NAME is that
// exact time whole and vmm_guest_cpu_us:NAME the sampled guest part
// subtracted from it, so a vCPU's split can be judged against its ticks.
// A thread born meanwhile counts whole. vmm_runq_wait_us is the time the threads were runnable
// but waited for a CPU (schedstat; not those in SCHED_IDLE): a wakeup's
// delay before the device's worker, or vhost-net's, runs, on the CPU it
// shares with the sender. Both are also split by thread name (vmm_host_cpu_ms:NAME,
// vmm_runq_wait_us:NAME; vhost-PID as vhost): which thread, the device's
// or a vCPU or the runtime's, used the CPU and waited for it; so are the
// switches (vmm_wakeups:NAME, vmm_preemptions:NAME): under TCG each switch
// between two processes empties QEMU's software TLB, so a thread's
// switches per frame are part of its CPU per frame.
func (t threadSwitches) since(before threadSwitches, pid int) map[string]uint64 {
	d := map[string]uint64{"vmm_wakeups": 0, "vmm_preemptions": 0, "vmm_threads_woken": 0, "vmm_wakeups_max": 0, "vmm_wakeups_tid2": 0,
		"vmm_host_cpu_ms": 0, "vmm_guest_cpu_ms": 0, "vmm_user_cpu_ms": 0, "vmm_sys_cpu_ms": 0,
		"vmm_busiest_user_cpu_ms": 0, "vmm_busiest_sys_cpu_ms": 0, "vmm_worker_cpu_ms": 0, "vmm_runq_wait_us": 0, "vmm_host_cpu_us": 0}
	for tid, now := range t {
		b := before[tid]
		if now.slept < b.slept || now.preempted < b.preempted || now.user < b.user || now.sys < b.sys || now.guest < b.guest || now.waited < b.waited || now.ran < b.ran {
			continue // a thread id reused
		}
		woke := now.slept - b.slept
		d["vmm_wakeups"] += woke
		d["vmm_preemptions"] += now.preempted - b.preempted
		d["vmm_wakeups:"+now.name] += woke
		d["vmm_preemptions:"+now.name] += now.preempted - b.preempted
		if now.idle {
			d["vmm_sched_idle:"+now.name]++
		}
		if wait := (now.waited - b.waited) / 1000; !now.idle {
			d["vmm_runq_wait_us"] += wait
			d["vmm_runq_wait_us:"+now.name] += wait
		}
		d["vmm_wakeups_max"] = max(d["vmm_wakeups_max"], woke)
		if tid == strconv.Itoa(pid+1) {
			d["vmm_wakeups_tid2"] = woke
		}
		if woke > 0 {
			d["vmm_threads_woken"]++
		}
		guest := now.guest - b.guest
		user := now.user - b.user
		user -= min(guest, user)
		sys := now.sys - b.sys
		d["vmm_guest_cpu_ms"] += guest * 1000 / userHZ
		d["vmm_host_cpu_ms"] += (user + sys) * 1000 / userHZ
		d["vmm_host_cpu_ms:"+now.name] += (user + sys) * 1000 / userHZ
		// Outside the guest, from the exact time on a CPU: only a vCPU's
		// guest part is a sample of ticks.
		ran := (now.ran - b.ran) / 1000
		host := ran - min(ran, guest*1000000/userHZ)
		d["vmm_host_cpu_us"] += host
		d["vmm_host_cpu_us:"+now.name] += host
		// The exact whole and the sampled guest part it is split by: a
		// vCPU's host time is only as good as its ticks' sample.
		d["vmm_ran_us:"+now.name] += ran
		d["vmm_guest_cpu_us:"+now.name] += guest * 1000000 / userHZ
		d["vmm_user_cpu_ms"] += user * 1000 / userHZ
		d["vmm_sys_cpu_ms"] += sys * 1000 / userHZ
		if now.worker {
			d["vmm_worker_cpu_ms"] += (user + sys) * 1000 / userHZ
		}
		if (user+sys)*1000/userHZ > d["vmm_busiest_user_cpu_ms"]+d["vmm_busiest_sys_cpu_ms"] {
			d["vmm_busiest_user_cpu_ms"], d["vmm_busiest_sys_cpu_ms"] = user*1000/userHZ, sys*1000/userHZ
		}
	}
	return d
}
