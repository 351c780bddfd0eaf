package vmm

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"tinyvmm/internal/sysmon"
	"tinyvmm/internal/threadname"
	"tinyvmm/kvm"
)

// exitCounts counts vCPU exits by reason, for --stats.
type exitCounts [32]atomic.Uint64

func (c *exitCounts) add(r kvm.ExitReason) {
	if int(r) < len(c) {
		c[r].Add(1)
	}
}

// snapshot returns the non-zero counts by exit name.
func (c *exitCounts) snapshot() map[string]uint64 {
	m := map[string]uint64{}
	for i := range c {
		if n := c[i].Load(); n > 0 {
			m[kvm.ExitReason(i).String()] = n
		}
	}
	return m
}

// runVCPU runs one vCPU on its own locked OS thread until the guest stops
// or the vCPU is interrupted. Guest stops go to m.stop; failures are
// returned.
func (m *machine) runVCPU(cpu *kvm.VCPU) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sysmon.ResetThread() // the thread may have come from sysmon (vmm.run's sysmon.Slow)
	defer threadname.Set(fmt.Sprintf("vcpu%d", cpu.ID()))()
	m.boot.noteRun()
	for first := true; ; first = false {
		reason, err := cpu.Run()
		if first && m.cfg.Stats != "" {
			m.boot.sampleSetup(m.ram)
		}
		if errors.Is(err, kvm.ErrInterrupted) {
			return nil
		}
		if err != nil {
			return err
		}
		m.exits.add(reason)
		if stop, err := m.handleExit(cpu, reason); stop || err != nil {
			return err
		}
	}
}

// exitSource is the part of *kvm.VCPU that exit handling reads (a fake
// in tests).
type exitSource interface {
	ID() int
	IO() kvm.IOExit
	MMIO() kvm.MMIOExit
	SystemEvent() kvm.SystemEvent
	InternalError() kvm.InternalError
	FailEntry() kvm.FailEntry
	Regs() (kvm.Regs, error)
}

// handleExit serves one exit; stop says the vCPU has nothing more to run.
func (m *machine) handleExit(cpu exitSource, reason kvm.ExitReason) (stop bool, err error) {
	switch reason {
	case kvm.ExitIO:
		io := cpu.IO()
		if io.Size == 0 {
			return false, nil
		}
		if io.Out {
			if err := m.userException(cpu, io.Port); err != nil {
				return true, err
			}
		}
		for i := 0; i+io.Size <= len(io.Data); i += io.Size {
			chunk := io.Data[i : i+io.Size]
			if io.Out {
				m.pio.Write(uint64(io.Port), chunk)
			} else {
				m.pio.Read(uint64(io.Port), chunk)
			}
		}
	case kvm.ExitMMIO:
		mm := cpu.MMIO()
		if mm.IsWrite {
			m.mmio.Write(mm.Addr, mm.Data)
		} else {
			m.mmio.Read(mm.Addr, mm.Data)
		}
	case kvm.ExitIntr, kvm.ExitIRQWindowOpen:
	case kvm.ExitHLT:
		// Only without an in-kernel LAPIC; with one, hlt waits in KVM.
		m.stop.Stop(GuestStop{Reason: StopPowerOff, Detail: fmt.Sprintf("vCPU %d halted", cpu.ID())})
		return true, nil
	case kvm.ExitShutdown:
		m.stop.Stop(GuestStop{Reason: StopTripleFault, Detail: m.where(cpu)})
		return true, nil
	case kvm.ExitSystemEvent:
		ev := cpu.SystemEvent()
		switch ev.Type {
		case kvm.SystemEventReset:
			m.stop.Stop(GuestStop{Reason: StopReboot, Detail: "system reset"})
		case kvm.SystemEventCrash:
			m.stop.Stop(GuestStop{Reason: StopCrash, Detail: m.where(cpu)})
		default:
			m.stop.Stop(GuestStop{Reason: StopPowerOff, Detail: "system shutdown"})
		}
		return true, nil
	case kvm.ExitInternalError:
		ie := cpu.InternalError()
		hint := ""
		if m.host.PVM && ie.Suberror == kvm.InternalErrorEmulation {
			hint = "; the host's KVM is PVM, whose emulator cannot run this instruction (see the PVM notes)"
		}
		return true, fmt.Errorf("%v at %s%s", ie, m.where(cpu), hint)
	case kvm.ExitFailEntry:
		return true, fmt.Errorf("%v at %s", cpu.FailEntry(), m.where(cpu))
	default:
		return true, fmt.Errorf("unexpected %v at %s", reason, m.where(cpu))
	}
	return false, nil
}

// where names a vCPU and its instruction pointer for error messages.
func (m *machine) where(cpu exitSource) string {
	regs, err := cpu.Regs()
	if err != nil {
		return fmt.Sprintf("vCPU %d", cpu.ID())
	}
	return fmt.Sprintf("vCPU %d, RIP %#x", cpu.ID(), regs.RIP)
}
