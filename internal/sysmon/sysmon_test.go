package sysmon

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Slow relies on sysmon being the process's second thread: the only
// Go thread that sleeps in nanosleep (syscall 35 on amd64; runtime.usleep),
// which it does between its looks at the scheduler.
func TestSysmonIsTheSecondThread(t *testing.T) {
	tid := TID()
	if tid == "" {
		t.Fatal("no second thread in /proc/self/task")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/self/task/" + tid + "/syscall")
		if err != nil {
			t.Skipf("cannot read what thread %s is doing: %v", tid, err)
		}
		if strings.HasPrefix(string(b), "35 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %s was never seen in nanosleep (last: %q): is it still sysmon?", tid, b)
		}
		go func() {}() // give sysmon something to look at
		time.Sleep(time.Millisecond)
	}
	Slow()
	n, _ := strconv.Atoi(tid)
	if attr, err := unix.SchedGetAttr(n, 0); err != nil || attr.Policy != unix.SCHED_IDLE {
		t.Errorf("sysmon's scheduling policy: %+v, %v; want SCHED_IDLE (%d)", attr, err, unix.SCHED_IDLE)
	}
	b, err := os.ReadFile("/proc/" + tid + "/timerslack_ns")
	switch {
	case err != nil:
		t.Skipf("no timerslack_ns: %v", err)
	case strings.TrimSpace(string(b)) == "50000" && os.Geteuid() != 0:
		t.Skip("not root: another thread's timer slack needs CAP_SYS_NICE")
	case strings.TrimSpace(string(b)) != "10000000":
		t.Errorf("sysmon's timer slack is %s ns, want 10000000", strings.TrimSpace(string(b)))
	}
}
