package vmm

import (
	"encoding/binary"
	"fmt"

	"tinyvmm/boot"
	"tinyvmm/devices"
)

// exceptionNames are the x86 exception vectors a user-mode guest can hit.
var exceptionNames = map[int]string{
	0: "#DE divide error", 1: "#DB debug", 3: "#BP breakpoint", 4: "#OF overflow",
	5: "#BR bound range", 6: "#UD invalid opcode", 7: "#NM no FPU", 8: "#DF double fault",
	10: "#TS invalid TSS", 11: "#NP segment not present", 12: "#SS stack fault",
	13: "#GP general protection", 14: "#PF page fault", 16: "#MF x87 error",
	17: "#AC alignment check", 18: "#MC machine check", 19: "#XM SIMD error",
}

// userException tells an exception in a guest started by boot.LoadUser from
// an exit status: the stub of vector N writes N to the exit port, and N=0
// would otherwise read as success. It returns nil for a plain exit.
func (m *machine) userException(cpu exitSource, port uint16) error {
	if !m.cfg.UserStart || port != devices.ExitPort {
		return nil
	}
	regs, err := cpu.Regs()
	if err != nil {
		return nil
	}
	vector, ok := boot.UserExceptionVector(regs.RIP)
	if !ok {
		return nil
	}
	name := exceptionNames[vector]
	if name == "" {
		name = "interrupt"
	}
	// The CPU pushed SS, RSP, RFLAGS, CS and RIP below the 16-byte aligned
	// ring-0 stack top (an error code, where there is one, comes after).
	where := ""
	if frame := uint64(boot.UserExceptionStack - 40); frame+8 <= uint64(len(m.ram.low)) {
		where = fmt.Sprintf(" at RIP %#x", binary.LittleEndian.Uint64(m.ram.low[frame:]))
	}
	return fmt.Errorf("user-mode guest took exception %s (vector %d)%s", name, vector, where)
}
