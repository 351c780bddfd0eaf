// Command init is the /init of the tinyvmm guest on hardware KVM. It mounts
// proc, sys, dev and tmp, brings lo up (and eth0 when the kernel's ip= does
// not own it, configured by DHCP with busybox udhcpc), mounts the --share directories (tinyvmm.shares=, virtio-fs) or, with tinyvmm.root=, enters the host's tree as its root (root.go), runs the command from tinyvmm.cmd= on the console, writes its
// exit status to tinyvmm's exit port and powers off. Without a command it
// runs a shell on the console. It prints nothing unless something fails.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// statusBadCmdline is reported when tinyvmm.cmd= cannot be decoded.
const statusBadCmdline = 125

// statusNoRoot is reported when tinyvmm.root= names a root that cannot be
// entered.
const statusNoRoot = 125

const defaultPath = "/bin:/sbin:/usr/bin:/usr/sbin"

func main() {
	if err := mountAll(); err != nil {
		warn(err)
	}
	signalBootDone()
	ensureConsole()
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", defaultPath)
	}

	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		warn(err)
	}
	params, err := parseCmdline(string(cmdline))
	if err != nil {
		warn(err)
		finish(statusBadCmdline)
	}
	if err := bringUpNetwork(params.hasIP); err != nil {
		warn(err)
	}
	if params.root != "" {
		entered, err := enterRoot(params.root, params.shares)
		if err != nil {
			warn(err)
		}
		if !entered {
			finish(statusNoRoot)
		}
	} else if err := mountShares("", params.shares); err != nil {
		warn(err)
	}
	for _, kv := range params.env {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v) // the command's, and where init looks for it (PATH)
	}
	if params.cwd != "" {
		// The command runs where the user ran tinyvmm, inside a share.
		if err := os.Chdir(params.cwd); err != nil {
			warn(err)
		}
	}

	if params.argv != nil {
		finish(runCommand(params.argv, os.Environ()))
	}
	runShell(os.Environ())
	finish(0)
}

// finish reports status to the exit device, then powers off. PID 1 must not
// return, so if power-off fails it waits forever.
func finish(status int) {
	// The command's last lines may still sit in the console's tty buffer,
	// which the UART sends by interrupts; the exit device ends the VM at
	// once, so wait for them first (tcdrain; a lost "3 packets received"
	// failed a test).
	unix.IoctlSetInt(1, unix.TCSBRK, 1)
	if err := reportExit(status); err != nil {
		warn(err)
	}
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		warn(fmt.Errorf("power off: %w", err))
	}
	for {
		time.Sleep(time.Hour)
	}
}

// ensureConsole gives init stdin, stdout and stderr on /dev/console when the
// kernel could not open it before init started.
func ensureConsole() {
	var st unix.Stat_t
	if unix.Fstat(1, &st) == nil {
		return
	}
	fd, err := unix.Open("/dev/console", unix.O_RDWR, 0)
	if err != nil {
		return
	}
	for target := 0; target <= 2; target++ {
		if fd != target {
			unix.Dup3(fd, target, 0)
		}
	}
	if fd > 2 {
		unix.Close(fd)
	}
}

// warn prints one line on the console.
func warn(err error) {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	fmt.Fprintln(os.Stderr, "init: "+msg)
}
