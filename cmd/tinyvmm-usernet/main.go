// Command tinyvmm-usernet is --net user's network in a process of its own:
// `tinyvmm run` starts it (package userproc) with one end of a
// SOCK_SEQPACKET socketpair on fd 3 and a pipe on fd 4, and it serves
// gvisor-tap-vsock's virtual network (package usernetd) on that end. It
// writes one line on the pipe, "ready ADDR..." once the hostfwd listeners
// are open and it has dropped its privileges (usernetd.DropPrivileges), or
// "error MESSAGE", and exits when the device's end closes (the
// VMM exited), on SIGTERM, or with the VMM (its parent death signal).
// It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"tinyvmm/usernetd"
	"tinyvmm/userproc"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ppid := os.Getppid()
	if prefix := os.Getenv(userproc.ProfileEnv); prefix != "" {
		go profile(prefix, nil)
	}
	var ready *os.File
	fail := func(err error) int {
		if ready == nil || writeLine(ready, userproc.ErrorLine(err)) != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", userproc.Program, err)
		}
		return 1
	}
	for _, fd := range []int{userproc.LinkFd, userproc.ReadyFd} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return fail(fmt.Errorf("no fd %d: it is started by tinyvmm run --net user, not by hand", fd))
		}
	}
	ready = os.NewFile(userproc.ReadyFd, "ready")
	cfg, err := userproc.ParseArgs(args)
	if err != nil {
		return fail(err)
	}
	if err := usernetd.StartTrace(); err != nil {
		return fail(err)
	}
	defer usernetd.StopTrace()
	b, err := usernetd.Attach(userproc.LinkFd, cfg)
	if err != nil {
		return fail(err)
	}
	// Everything that needs a privilege is open now (a hostfwd on a
	// privileged port): the frames come only after this.
	warning, err := usernetd.DropPrivileges(ppid)
	if err != nil {
		b.Close()
		return fail(fmt.Errorf("net user: %v", err))
	}
	if warning != "" {
		fmt.Fprintf(os.Stderr, "%s: %s\n", userproc.Program, warning)
	}
	if err := writeLine(ready, userproc.ReadyLine(b.Forwards())); err != nil {
		b.Close()
		return 1 // the VMM is gone
	}
	ready.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	select {
	case <-b.Done():
	case <-sig:
	}
	b.Close()
	return 0
}

func writeLine(f *os.File, line string) error {
	_, err := f.WriteString(line)
	return err
}
