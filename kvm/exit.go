package kvm

import (
	"encoding/binary"
	"fmt"
)

// ExitReason is kvm_run.exit_reason.
type ExitReason uint32

// Exit reasons tinyvmm handles (<linux/kvm.h> KVM_EXIT_*).
const (
	ExitUnknown       ExitReason = 0
	ExitException     ExitReason = 1
	ExitIO            ExitReason = 2
	ExitHypercall     ExitReason = 3
	ExitDebug         ExitReason = 4
	ExitHLT           ExitReason = 5
	ExitMMIO          ExitReason = 6
	ExitIRQWindowOpen ExitReason = 7
	ExitShutdown      ExitReason = 8
	ExitFailEntry     ExitReason = 9
	ExitIntr          ExitReason = 10
	ExitNMI           ExitReason = 16
	ExitInternalError ExitReason = 17
	ExitSystemEvent   ExitReason = 24
)

var exitNames = map[ExitReason]string{
	ExitUnknown: "UNKNOWN", ExitException: "EXCEPTION", ExitIO: "IO", ExitHypercall: "HYPERCALL",
	ExitDebug: "DEBUG", ExitHLT: "HLT", ExitMMIO: "MMIO", ExitIRQWindowOpen: "IRQ_WINDOW_OPEN",
	ExitShutdown: "SHUTDOWN", ExitFailEntry: "FAIL_ENTRY", ExitIntr: "INTR", ExitNMI: "NMI",
	ExitInternalError: "INTERNAL_ERROR", ExitSystemEvent: "SYSTEM_EVENT",
}

func (r ExitReason) String() string {
	if n, ok := exitNames[r]; ok {
		return "KVM_EXIT_" + n
	}
	return fmt.Sprintf("KVM_EXIT_%d", uint32(r))
}

// Offsets into struct kvm_run (x86-64), checked against the kernel header
// in abi_test.go.
const (
	runImmediateExit = 1
	runExitReason    = 8
	runExitUnion     = 32 // the exit-specific union
)

// IOExit is a KVM_EXIT_IO: Count accesses of Size bytes to Port. Data
// aliases the kvm_run page: fill it for an in, read it for an out.
type IOExit struct {
	Port  uint16
	Out   bool
	Size  int
	Count int
	Data  []byte
}

// MMIOExit is a KVM_EXIT_MMIO. Data aliases the kvm_run page.
type MMIOExit struct {
	Addr    uint64
	IsWrite bool
	Data    []byte
}

// SystemEvent types.
const (
	SystemEventShutdown = 1
	SystemEventReset    = 2
	SystemEventCrash    = 3
)

// SystemEvent is a KVM_EXIT_SYSTEM_EVENT (PSCI-style shutdown/reset; on
// x86 it comes from e.g. a triple fault with some configurations).
type SystemEvent struct {
	Type uint32
	Data []uint64
}

// InternalError is a KVM_EXIT_INTERNAL_ERROR, e.g. an emulation failure
// (suberror 1): an instruction KVM's emulator cannot run.
type InternalError struct {
	Suberror uint32
	Data     []uint64
}

// Internal error suberrors.
const (
	InternalErrorEmulation    = 1
	InternalErrorSimulEx      = 2
	InternalErrorDeliveryEv   = 3
	InternalErrorUnexpectedEx = 4
)

func (e InternalError) Error() string {
	what := map[uint32]string{
		InternalErrorEmulation:    "emulation failure (an instruction KVM's emulator cannot run)",
		InternalErrorSimulEx:      "exception while handling an exception",
		InternalErrorDeliveryEv:   "exit while delivering an event",
		InternalErrorUnexpectedEx: "unexpected exit reason",
	}[e.Suberror]
	if what == "" {
		what = fmt.Sprintf("suberror %d", e.Suberror)
	}
	return fmt.Sprintf("KVM internal error: %s, data %#x", what, e.Data)
}

// FailEntry is a KVM_EXIT_FAIL_ENTRY: the hardware refused the guest state.
type FailEntry struct {
	Reason uint64
	CPU    uint32
}

func (e FailEntry) Error() string {
	return fmt.Sprintf("KVM entry failed: hardware reason %#x on CPU %d (invalid guest state)", e.Reason, e.CPU)
}

// decoder reads the exit union out of a mapped kvm_run page. It clamps
// every length so a malformed page never panics.
type decoder []byte

func (d decoder) u8(off int) uint8 {
	if off >= len(d) {
		return 0
	}
	return d[off]
}
func (d decoder) u16(off int) uint16 {
	if off+2 > len(d) {
		return 0
	}
	return binary.LittleEndian.Uint16(d[off:])
}
func (d decoder) u32(off int) uint32 {
	if off+4 > len(d) {
		return 0
	}
	return binary.LittleEndian.Uint32(d[off:])
}
func (d decoder) u64(off int) uint64 {
	if off+8 > len(d) {
		return 0
	}
	return binary.LittleEndian.Uint64(d[off:])
}
func (d decoder) bytes(off, n uint64) []byte {
	if off > uint64(len(d)) || n > uint64(len(d))-off {
		return nil
	}
	return d[off : off+n : off+n]
}
func (d decoder) u64s(off int, n uint32) []uint64 {
	if n > 16 {
		n = 16
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = d.u64(off + 8*i)
	}
	return out
}

func (d decoder) reason() ExitReason { return ExitReason(d.u32(runExitReason)) }

func (d decoder) io() IOExit {
	u := runExitUnion
	e := IOExit{
		Out:   d.u8(u) == 1,
		Size:  int(d.u8(u + 1)),
		Port:  d.u16(u + 2),
		Count: int(d.u32(u + 4)),
	}
	e.Data = d.bytes(d.u64(u+8), uint64(e.Size)*uint64(e.Count))
	return e
}

func (d decoder) mmio() MMIOExit {
	u := runExitUnion
	n := d.u32(u + 16)
	if n > 8 {
		n = 8
	}
	return MMIOExit{Addr: d.u64(u), Data: d.bytes(uint64(u+8), uint64(n)), IsWrite: d.u8(u+20) != 0}
}

func (d decoder) systemEvent() SystemEvent {
	u := runExitUnion
	return SystemEvent{Type: d.u32(u), Data: d.u64s(u+8, d.u32(u+4))}
}

func (d decoder) internalError() InternalError {
	u := runExitUnion
	return InternalError{Suberror: d.u32(u), Data: d.u64s(u+8, d.u32(u+4))}
}

func (d decoder) failEntry() FailEntry {
	u := runExitUnion
	return FailEntry{Reason: d.u64(u), CPU: d.u32(u + 8)}
}
