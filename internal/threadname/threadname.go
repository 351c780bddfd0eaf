// Package threadname names the calling OS thread, so that top -H, ps -L,
// perf and /proc/PID/task/TID/comm tell a VMM's threads apart (its vCPUs
// and device workers), as QEMU's "CPU 0/KVM" and Firecracker's "fc_vcpu 0"
// do. Without it every thread is called after the binary.
package threadname

import (
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set names the calling thread (the kernel keeps the first 15 bytes) and
// returns a func that gives the thread its old name back. The caller must
// hold the thread (runtime.LockOSThread) until it has called that func:
// Go hands an unlocked thread to other goroutines, which must not run
// under a vCPU's or a worker's name. Naming is best effort: a failure
// leaves the name as it was.
func Set(name string) (restore func()) {
	var old [16]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&old[0])), 0, 0, 0); err != nil {
		return func() {}
	}
	set(name)
	return func() { set(unix.ByteSliceToString(old[:])) }
}

func set(name string) {
	p, err := unix.BytePtrFromString(name)
	if err != nil { // a NUL inside: no name, rather than a cut one
		return
	}
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
}

// Of is the name of thread tid of this process, "" once the thread is gone.
func Of(tid int) string {
	b, _ := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/comm")
	return strings.TrimSuffix(string(b), "\n")
}
