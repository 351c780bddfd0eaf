package nested

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vcpuThreads finds a thread by the name TCG gives its vCPU threads.
func TestVCPUThreadsByName(t *testing.T) {
	found := make(chan map[int]int)
	named := make(chan int)
	go func() {
		runtime.LockOSThread() // the thread dies with the goroutine: its name goes with it
		name := []byte("CPU 3/TCG\x00")
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
			t.Error(err)
		}
		named <- unix.Gettid()
		<-found
	}()
	tid := <-named
	got := vcpuThreads(os.Getpid())
	close(found)
	if got[3] != tid { // other tests may still have a "CPU 0/TCG" thread
		t.Errorf("vcpuThreads = %v, want CPU 3 on thread %d", got, tid)
	}
}

// threadStates reads this test's own thread: running or runnable now.
func TestThreadStatesOfThisThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	got := threadStates(os.Getpid(), unix.Gettid(), 3, time.Millisecond)
	if len(got) < 3 || got[0] != 'R' || strings.Contains(got[:3], "?") {
		t.Errorf("states %q, want R first", got)
	}
}
