package main

import (
	"fmt"
	"os"
)

// exitPort is the I/O port of tinyvmm's exit device (QEMU: isa-debug-exit at
// iobase 0x501). A 1-byte write of the status ends the VM with it.
const exitPort = 0x501

// reportExit writes status to the exit port through /dev/port.
func reportExit(status int) error {
	f, err := os.OpenFile("/dev/port", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cannot report the exit status: %w (is CONFIG_DEVPORT set?)", err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{exitByte(status)}, exitPort); err != nil {
		return fmt.Errorf("cannot report the exit status to port %#x: %w", exitPort, err)
	}
	return nil
}

// exitByte clamps a status to the 0-255 a shell would report.
func exitByte(status int) byte {
	if status < 0 || status > 255 {
		return 255
	}
	return byte(status)
}
