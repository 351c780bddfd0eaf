package usernetd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Nobody is the user and group tinyvmm-usernet becomes when started as
// root, as passt does: the stack parses every frame the guest makes up, so
// what it can do if that goes wrong should be nothing a root process could.
const Nobody = 65534

// DropPrivileges is what tinyvmm-usernet does once its link and hostfwd
// listeners are open (a privileged port is opened as root first): nothing
// after that needs a privilege. Every thread gets no_new_privs (no exec
// can gain one back) and loses its ambient capabilities; as root, the
// process also empties its capability bounding set and becomes Nobody,
// with no supplementary groups, which clears its other capabilities.
//
// ppid is the parent it was started by: changing uid clears the parent
// death signal, so it is set again, and if the parent is already gone
// DropPrivileges says so (the caller exits). A warning is what it could
// not do but went on without.
func DropPrivileges(ppid int) (warning string, err error) {
	// Per-thread state in Linux: it must be set on every thread the Go
	// runtime has, which it cannot do in a binary with cgo (make build
	// builds without); the uid change below still reaches every thread
	// there, through the C library.
	perThread := true
	if err := allThreads(unix.PR_SET_NO_NEW_PRIVS, 1, 0); errors.Is(err, unix.ENOTSUP) {
		perThread = false
		warning = "built with cgo, so no_new_privs and the capability bounding set are left as they were (build it with CGO_ENABLED=0, as make build does)"
	} else if err != nil {
		return "", fmt.Errorf("no_new_privs: %v", err)
	}
	if perThread {
		if err := allThreads(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return "", fmt.Errorf("clearing ambient capabilities: %v", err) // EINVAL: a kernel without them
		}
	}
	if os.Geteuid() != 0 {
		return warning, nil
	}
	if perThread {
		last, err := lastCap()
		if err != nil {
			return "", err
		}
		for c := 0; c <= last; c++ {
			if err := allThreads(unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
				return "", fmt.Errorf("dropping capability %d from the bounding set: %v", c, err)
			}
		}
	}
	// Go's syscall package changes these on every thread.
	if err := syscall.Setgroups(nil); err != nil {
		return "", fmt.Errorf("setgroups: %v", err)
	}
	if err := syscall.Setresgid(Nobody, Nobody, Nobody); err != nil {
		return "", fmt.Errorf("setresgid %d: %v", Nobody, err)
	}
	if err := syscall.Setresuid(Nobody, Nobody, Nobody); err != nil {
		return "", fmt.Errorf("setresuid %d: %v", Nobody, err)
	}
	// Any one thread's death signal is enough: it is sent to the process.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return "", fmt.Errorf("parent death signal: %v", err)
	}
	if os.Getppid() != ppid {
		return "", errors.New("the VMM exited while the network started")
	}
	return warning, nil
}

func allThreads(option, a2, a3 uintptr) error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, option, a2, a3); e != 0 {
		return e
	}
	return nil
}

// lastCap is the highest capability number the kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("cap_last_cap %q", b)
	}
	return n, nil
}
