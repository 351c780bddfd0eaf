package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exit statuses init reports when the command never ran, as a shell would.
const (
	statusNotFound      = 127
	statusCannotExecute = 126
)

// runCommand runs argv with the console as stdin, stdout and stderr and
// returns its exit status (128+signal when a signal killed it).
func runCommand(argv []string, env []string) int {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		warn(fmt.Errorf("cannot run %q: %w", argv[0], err))
		return statusNotFound
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		warn(fmt.Errorf("cannot run %q: %w", argv[0], explainStartError(path, err)))
		return statusCannotExecute
	}
	pid := proc.Pid
	proc.Release()
	return waitReaping(pid)
}

// runShell runs /bin/sh on the console as a session leader with the console
// as its controlling terminal, so job control and Ctrl-C work.
func runShell(env []string) {
	tty, err := os.OpenFile(consoleDevice(), os.O_RDWR, 0)
	if err != nil {
		warn(fmt.Errorf("cannot open the console for the shell: %w", err))
		return
	}
	defer tty.Close()
	proc, err := os.StartProcess("/bin/sh", []string{"sh"}, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{tty, tty, tty},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0},
	})
	if err != nil {
		warn(fmt.Errorf("cannot run /bin/sh: %w", err))
		return
	}
	pid := proc.Pid
	proc.Release()
	waitReaping(pid)
}

// consoleDevice names the tty behind /dev/console (/dev/ttyS0 on tinyvmm):
// /dev/console itself cannot be a controlling terminal.
func consoleDevice() string {
	active, err := os.ReadFile("/sys/class/tty/console/active")
	if err == nil {
		if fields := strings.Fields(string(active)); len(fields) > 0 {
			dev := "/dev/" + fields[len(fields)-1]
			if _, err := os.Stat(dev); err == nil {
				return dev
			}
		}
	}
	return "/dev/console"
}

// waitReaping waits for pid and, as PID 1 must, reaps every orphan that
// exits meanwhile. It returns pid's exit status.
func waitReaping(pid int) int {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			warn(fmt.Errorf("waiting for pid %d: %w", pid, err))
			return statusCannotExecute
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}
