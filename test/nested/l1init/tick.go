package main

import (
	"fmt"
	"os"
	"strings"
)

// L1 runs under QEMU's TCG, which loses, now and then, the request by
// which its I/O thread tells the vCPU to look at its local APIC (see
// test/nested/README.md, "Lost interrupts"). L1's APIC timer is one-shot:
// its next expiry is programmed by the handler of this one, so a lost
// timer interrupt stops L1 until some other interrupt arrives from
// QEMU's I/O thread and makes the vCPU poll its APIC again. The PIT, run
// periodically, is such an interrupt: a lost interrupt then costs L1 one
// PIT period instead of a freeze. Linux keeps IRQ 0 (the "timer" line) but
// has stopped the PIT once the local APIC took over its ticks; an
// interrupt from it only runs the unused clock event device's no-op
// handler.

// PITHz is how often the PIT interrupts L1.
const PITHz = 100

// pitInputHz is the PIT's input clock.
const pitInputHz = 1193182

// startPIT programs PIT channel 0 as a rate generator (mode 2) at PITHz,
// through /dev/port.
func startPIT() error {
	f, err := os.OpenFile("/dev/port", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	div := (pitInputHz + PITHz/2) / PITHz
	// Channel 0, low byte then high byte, mode 2, binary.
	for _, w := range []struct {
		port int64
		b    byte
	}{{0x43, 0x34}, {0x40, byte(div)}, {0x40, byte(div >> 8)}} {
		if _, err := f.WriteAt([]byte{w.b}, w.port); err != nil {
			return fmt.Errorf("port %#x: %w", w.port, err)
		}
	}
	return nil
}

// pitInterrupts is IRQ 0's count from /proc/interrupts (-1 if absent).
func pitInterrupts() int {
	b, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "0:" {
			continue
		}
		sum := 0
		for _, v := range f[1:] {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil {
				break
			}
			sum += n
		}
		return sum
	}
	return -1
}
