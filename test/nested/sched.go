package nested

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"tinyvmm/internal/schedstat"
)

// threadSched is what the host's scheduler says of one QEMU thread: how
// long it has run on a CPU and how long it has waited runnable for one
// (/proc/PID/task/TID/schedstat), and its state letter.
type threadSched struct {
	Run, Wait time.Duration
	State     string
}

// readThreadSched reads /proc/pid/task/tid's schedstat and state.
func readThreadSched(pid, tid int) (threadSched, bool) {
	t, err := schedstat.ReadThread(fmt.Sprintf("/proc/%d/task/%d", pid, tid))
	if err != nil { // zero Run would read as a vCPU the host kept off its CPU
		return threadSched{}, false
	}
	return threadSched{Run: time.Duration(t.RunNs), Wait: time.Duration(t.WaitNs), State: t.State}, true
}

// threadStates samples a thread's state letter n times, every, and the
// kernel function it last waited in: "RRSSS, wchan futex_wait_queue".
func threadStates(pid, tid, n int, every time.Duration) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(every)
		}
		ts, ok := readThreadSched(pid, tid)
		if !ok {
			b.WriteByte('?')
			continue
		}
		b.WriteString(ts.State)
	}
	if w, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/wchan", pid, tid)); err == nil && len(w) > 0 {
		b.WriteString(", wchan " + string(w))
	}
	return b.String()
}

// vcpuThreads maps each vCPU index of QEMU process pid to its thread id:
// TCG names its vCPU threads "CPU N/TCG".
func vcpuThreads(pid int) map[int]int {
	tids := map[int]int{}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return tids
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if err != nil {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(comm)), "CPU %d/TCG", &n); err == nil {
			tids[n] = tid
		}
	}
	return tids
}

// schedDelta describes what a thread did between two reads over wall
// time wall: "ran 800ms, waited 50ms for a host CPU in 1.2s, now R".
func schedDelta(from, to threadSched, wall time.Duration) string {
	return fmt.Sprintf("ran %v, waited %v for a host CPU in %v, now %s",
		(to.Run - from.Run).Round(time.Millisecond), (to.Wait - from.Wait).Round(time.Millisecond),
		wall.Round(time.Millisecond), to.State)
}
