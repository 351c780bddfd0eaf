package main

import "golang.org/x/sys/unix"

// outb writes value to an I/O port with the x86 out instruction, after
// ioperm lets this process do so (PID 1 runs as root).
func outb(port uint16, value byte) {
	if unix.Ioperm(int(port), 1, 1) != nil {
		return
	}
	outInstr(port, value)
	unix.Ioperm(int(port), 1, 0)
}

// outInstr is boottimer_amd64.s.
func outInstr(port uint16, value byte)
