// Package schedstat reads what the kernel's scheduler says of a thread
// in /proc: its CPU time (on a shared machine a steadier measure of a
// worker's cost than wall time), its waits for a CPU, its sleeps and
// preemptions.
package schedstat

import (
	"os"
	"strconv"
)

// ThreadCPU is the CPU time in ns that thread tid of this process has run
// (the first field of /proc/self/task/TID/schedstat), 0 if unknown.
func ThreadCPU(tid int) uint64 { return read("/proc/self/task/" + strconv.Itoa(tid) + "/schedstat") }

// TaskCPU is the CPU time in ns that task pid has run, any process's or
// a kernel thread's (/proc/PID/schedstat), 0 if unknown.
func TaskCPU(pid int) uint64 { return read("/proc/" + strconv.Itoa(pid) + "/schedstat") }

// read is the CPU time in a schedstat file, 0 if it cannot be read or
// parsed.
func read(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var t Thread
	if t.parseSchedstat(b) != nil {
		return 0
	}
	return t.RunNs
}
