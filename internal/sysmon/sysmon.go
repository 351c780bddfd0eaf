// Package sysmon keeps Go's sysmon thread from waking a CPU more often
// than the tick, for a VMM's vCPUs (vmm) and a benchmark's measurements
// (bench/e2e).
package sysmon

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Go's sysmon thread watches the scheduler from timed sleeps of 20 us up
// to 10 ms, and drops back to 20 us each time it takes a P back from a
// thread blocked in a system call or wakes from its deep sleep: in a VMM
// whose threads block in KVM_RUN and epoll_wait that is many times a
// second (in a 2-CPU nested L1 flood, ~1,450 wakeups a second). Each
// wakeup is a timer interrupt on the CPU where sysmon slept, and an exit of
// the vCPU that runs there. Timer slack lets the kernel fire those sleeps
// with the next interrupt that comes anyway (the tick), so sysmon wakes at
// most once a tick and costs the vCPUs nothing extra. A 10 ms slack is at
// most one tick at HZ=100, and sysmon's own longest sleep.
const SlackNs = 10_000_000

// Slow gives sysmon's thread SlackNs of timer slack, and the idle
// scheduling class. Sysmon is the first thread the runtime makes, so it
// is the second in /proc/self/task, which lists a process's threads in
// the order they were made (TestSysmonIsTheSecondThread holds the runtime
// to that). Setting another thread's slack (/proc/TID/timerslack_ns)
// needs CAP_SYS_NICE; without it (a rootless tinyvmm) the slack stays.
//
// Why the idle class: when every P has been idle a while (a device
// worker asleep in epoll_wait between two pings), sysmon sleeps deeply,
// and the first thread to come back from a system call wakes it: the
// worker, on the way to the frame that woke it. A sysmon of the ordinary
// class then takes the worker's CPU for its own look at the scheduler,
// at the moment a frame waits. In the idle class it runs only on a CPU
// that has nothing else to run, and gives it up at once to a thread that
// wakes. Its work (taking Ps back from blocked threads, preempting long
// runs, a forced GC every two minutes) can wait that long; a thread may
// lower its own process's threads without privileges.
func Slow() {
	tid := TID()
	if tid == "" {
		return
	}
	os.WriteFile("/proc/"+tid+"/timerslack_ns", []byte(strconv.Itoa(SlackNs)), 0)
	if n, err := strconv.Atoi(tid); err == nil {
		unix.SchedSetAttr(n, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
	}
}

// TID is the thread id of sysmon, "" if not found.
func TID() string {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return ""
	}
	defer d.Close()
	tids, err := d.Readdirnames(2) // unsorted: creation order
	if err != nil || len(tids) < 2 || tids[0] != strconv.Itoa(os.Getpid()) {
		return ""
	}
	return tids[1]
}
