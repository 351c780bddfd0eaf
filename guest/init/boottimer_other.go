//go:build !amd64

package main

// outb does nothing where there is no x86 port I/O: the boot is not timed.
func outb(port uint16, value byte) {}
