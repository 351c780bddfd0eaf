package sysmon

import (
	"os"
	"runtime"
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
	// The idle class only where the slack could be set: with CAP_SYS_NICE,
	// which a thread needs to leave that class again (ResetThread).
	want := unix.SCHED_NORMAL
	if os.Geteuid() == 0 {
		want = unix.SCHED_IDLE
	}
	n, _ := strconv.Atoi(tid)
	if attr, err := unix.SchedGetAttr(n, 0); err != nil || int(attr.Policy) != want {
		t.Errorf("sysmon's scheduling policy: %+v, %v; want %d", attr, err, want)
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

// A thread started from sysmon inherits its class and slack;
// ResetThread takes the calling thread back to the normal class and the
// kernel's default slack (out of the idle class only with CAP_SYS_NICE).
func TestResetThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_SYS_NICE to leave the idle class, as Slow does")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, SlackNs, 0, 0, 0); err != nil {
		t.Fatalf("prctl PR_SET_TIMERSLACK: %v", err)
	}
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0); err != nil {
		t.Fatalf("into the idle class: %v", err)
	}
	ResetThread()
	if got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err != nil || got != DefaultSlackNs {
		t.Errorf("the thread's slack after ResetThread: %d, %v; want %d", got, err, DefaultSlackNs)
	}
	if attr, err := unix.SchedGetAttr(0, 0); err != nil || attr.Policy != unix.SCHED_NORMAL {
		t.Errorf("the thread's class after ResetThread: %+v, %v; want SCHED_NORMAL", attr, err)
	}
}

// ParkPoller's goroutine waits in Go's network poller (a goroutine dump
// calls that "IO wait") until stop, and is gone after it.
func TestParkPoller(t *testing.T) {
	stop := ParkPoller()
	waitParked(t, true)
	stop()
	waitParked(t, false)
}

func waitParked(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for parkedInPoller() != want {
		if time.Now().After(deadline) {
			t.Fatalf("ParkPoller's goroutine waiting in the poller: %v, want %v", !want, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func parkedInPoller() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "sysmon.ParkPoller") {
			return true
		}
	}
	return false
}
