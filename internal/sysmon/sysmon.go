// Package sysmon keeps a VMM's Go sysmon thread from waking a CPU more
// often than the tick and from taking one that a vCPU or a device worker
// needs (vmm), puts back the threads that inherit that (ResetThread), and
// keeps it from starting a thread for each wake of an idle worker
// (ParkPoller).
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

// Slow gives sysmon's thread SlackNs of timer slack and the idle
// scheduling class, so that it neither wakes a CPU between ticks nor
// takes one from a thread with work. Sysmon is the first thread the
// runtime makes, so it is the second in /proc/self/task, which lists a
// process's threads in the order they were made
// (TestSysmonIsTheSecondThread holds the runtime to that).
//
// Both are inherited: every thread the runtime starts from sysmon (when
// it takes a P back from a thread blocked in a system call and hands it
// on) is cloned from sysmon's, and a process started from such a thread
// has them too. So Slow acts only where a thread can take them off
// again, with CAP_SYS_NICE (an unprivileged thread cannot leave the idle
// class, and cannot set another thread's slack either), and a thread
// whose work must not wait, or that starts a process, calls ResetThread
// once it has locked itself. Only a VMM calls Slow, never a harness that
// starts VMMs.
func Slow() {
	tid := TID()
	if tid == "" {
		return
	}
	if os.WriteFile("/proc/"+tid+"/timerslack_ns", []byte(strconv.Itoa(SlackNs)), 0) != nil {
		return // no CAP_SYS_NICE: no thread could undo what Slow passes on
	}
	if n, err := strconv.Atoi(tid); err == nil {
		unix.SchedSetAttr(n, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
	}
}

// DefaultSlackNs is the kernel's default timer slack (50 us).
const DefaultSlackNs = 50_000

// ResetThread gives the calling thread the normal scheduling class and
// the kernel's default timer slack, which a thread started from sysmon
// after Slow did not have (its default slack is then Slow's too, so the
// slack is set, not reset). Call it on a locked thread: a vCPU's, a
// device worker's, one that starts a process.
func ResetThread() {
	unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}, 0)
	unix.Prctl(unix.PR_SET_TIMERSLACK, DefaultSlackNs, 0, 0, 0)
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

// ParkPoller parks a goroutine on Go's network poller until stop is
// called, so that one idle thread of the runtime waits in the poller.
// Without any goroutine waiting there (a VMM may have none), sysmon, when
// it takes the P of a thread blocked in a system call (a vCPU in KVM_RUN,
// a net worker asleep in epoll_wait) and finds every other P idle, starts
// a thread to poll the network instead (runtime.handoffp), which finds
// nothing and sleeps again: a wakeup on the worker's CPU for each lone
// frame that woke an idle worker.
func ParkPoller() (stop func()) {
	r, w, err := os.Pipe() // non-blocking: a read waits in the poller
	if err != nil {
		return func() {}
	}
	go func() {
		var b [1]byte
		r.Read(b[:]) // until w is closed
		r.Close()
	}()
	return func() { w.Close() }
}
