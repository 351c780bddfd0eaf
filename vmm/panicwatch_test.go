package vmm

import (
	"io"
	"strings"
	"testing"
)

func TestPanicWatcher(t *testing.T) {
	reboot := GuestStop{Reason: StopReboot, Detail: "i8042 reset"}
	for _, c := range []struct {
		console string
		want    StopReason
		detail  string
	}{
		{"hello\nbye\n", StopReboot, "i8042 reset"},
		{"[    1.2] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000000\r\n", StopPanic, "Attempted to kill init! exitcode=0x00000000"},
		{"Kernel panic - not syncing: No working init found.  Try passing init= option\n", StopNoInit, "No working init found.  Try passing init= option"},
		{"x\nKernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)", StopNoInit, "VFS: Unable to mount root fs on unknown-block(0,0)"},
		{"Kernel panic - not syncing: first\nKernel panic - not syncing: second\n", StopPanic, "first"},
		{strings.Repeat("y", 5000) + "\nKernel panic - not syncing: " + strings.Repeat("z", 900) + "\n", StopPanic, strings.Repeat("z", 512-28)},
	} {
		p := &panicWatcher{w: io.Discard}
		// Byte by byte, as the UART delivers it.
		for i := range len(c.console) {
			p.Write([]byte{c.console[i]})
		}
		got := p.explain(reboot)
		if got.Reason != c.want || got.Detail != c.detail {
			t.Errorf("console %.60q: got %v %q, want %v %q", c.console, got.Reason, got.Detail, c.want, c.detail)
		}
	}
	p := &panicWatcher{w: io.Discard}
	p.Write([]byte("Kernel panic - not syncing: oops\n"))
	exit := GuestStop{Reason: StopExitDevice, Status: 3}
	if got := p.explain(exit); got != exit {
		t.Errorf("an exit-device stop after a panic line changed: %+v", got)
	}
}
