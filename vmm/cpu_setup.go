package vmm

import (
	"encoding/binary"
	"fmt"

	"tinyvmm/boot"
	"tinyvmm/kvm"
)

// MSRs set on every vCPU before it runs, as peers do for Linux.
const (
	msrIA32TSC          = 0x10
	msrIA32SysenterCS   = 0x174
	msrIA32SysenterESP  = 0x175
	msrIA32SysenterEIP  = 0x176
	msrIA32MiscEnable   = 0x1a0
	msrMTRRDefType      = 0x2ff
	msrSTAR             = 0xc0000081
	msrLSTAR            = 0xc0000082
	msrCSTAR            = 0xc0000083
	msrSyscallMask      = 0xc0000084
	msrKernelGSBase     = 0xc0000102
	miscEnableFastStr   = 1 << 0
	mtrrEnableWriteBack = 1<<11 | 6 // MTRRs on, default type write-back
)

func bootMSRs() []kvm.MSREntry {
	return []kvm.MSREntry{
		{Index: msrIA32SysenterCS}, {Index: msrIA32SysenterESP}, {Index: msrIA32SysenterEIP},
		{Index: msrSTAR}, {Index: msrCSTAR}, {Index: msrKernelGSBase}, {Index: msrSyscallMask}, {Index: msrLSTAR},
		{Index: msrIA32TSC},
		{Index: msrIA32MiscEnable, Data: miscEnableFastStr},
		{Index: msrMTRRDefType, Data: mtrrEnableWriteBack},
	}
}

// setMSRs sets what KVM accepts, one MSR at a time: an MSR this host's
// KVM refuses (PVM does not implement every one) is skipped, not fatal.
func setMSRs(cpu *kvm.VCPU, entries []kvm.MSREntry) (skipped []uint32) {
	for _, e := range entries {
		if cpu.SetMSRs([]kvm.MSREntry{e}) != nil {
			skipped = append(skipped, e.Index)
		}
	}
	return skipped
}

// LAPIC local vector table entries and delivery modes.
const (
	apicLVT0        = 0x350
	apicLVT1        = 0x360
	apicDeliveryMsk = 0x700
	apicModeExtINT  = 0x700
	apicModeNMI     = 0x400
)

// setLINTs wires LINT0 to the PIC (ExtINT) and LINT1 to NMI, the virtual
// wire mode a PC's firmware leaves and Linux expects before it sets up
// the IOAPIC.
func setLINTs(cpu *kvm.VCPU) error {
	l, err := cpu.LAPIC()
	if err != nil {
		return err
	}
	set := func(reg int, mode uint32) {
		v := binary.LittleEndian.Uint32(l.Regs[reg:])
		binary.LittleEndian.PutUint32(l.Regs[reg:], v&^apicDeliveryMsk|mode)
	}
	set(apicLVT0, apicModeExtINT)
	set(apicLVT1, apicModeNMI)
	return cpu.SetLAPIC(l)
}

func segment(s boot.Segment) kvm.Segment {
	k := kvm.Segment{
		Base: s.Base, Limit: s.Limit, Selector: s.Selector, Type: s.Type,
		Present: s.Present, DPL: s.DPL, DB: s.DB, S: s.S, L: s.L, G: s.G, AVL: s.AVL,
	}
	if s.Present == 0 {
		k.Unusable = 1
	}
	return k
}

// stateSetter is the part of *kvm.VCPU setBootState uses (a fake in tests).
type stateSetter interface {
	Sregs() (kvm.Sregs, error)
	SetSregs(kvm.Sregs) error
	SetFPU(kvm.FPU) error
	SetRegs(kvm.Regs) error
}

// setBootState puts the BSP in the state the boot package computed: 32-bit
// protected mode for a PVH entry, long mode for a bzImage or 64-bit ELF,
// CPL3 long mode for the user-mode start.
func setBootState(cpu stateSetter, st boot.CPUState) error {
	sregs, err := cpu.Sregs()
	if err != nil {
		return err
	}
	sregs.CS, sregs.DS, sregs.ES = segment(st.CS), segment(st.DS), segment(st.ES)
	sregs.FS, sregs.GS, sregs.SS = segment(st.FS), segment(st.GS), segment(st.SS)
	sregs.TR, sregs.LDT = segment(st.TR), segment(st.LDT)
	sregs.GDT = kvm.DTable{Base: st.GDTBase, Limit: st.GDTLimit}
	sregs.IDT = kvm.DTable{Base: st.IDTBase, Limit: st.IDTLimit}
	sregs.CR0, sregs.CR3, sregs.CR4, sregs.EFER = st.CR0, st.CR3, st.CR4, st.EFER
	if err := cpu.SetSregs(sregs); err != nil {
		return err
	}
	// x87 and SSE as after FNINIT and a reset MXCSR.
	if err := cpu.SetFPU(kvm.FPU{FCW: 0x37f, MXCSR: 0x1f80}); err != nil {
		return err
	}
	return cpu.SetRegs(kvm.Regs{RIP: st.RIP, RSP: st.RSP, RSI: st.RSI, RDI: st.RDI, RBX: st.RBX, RFLAGS: st.RFLAGS | 2})
}

// setupVCPU shapes CPUID, sets MSRs and the LAPIC LINTs; the BSP also
// gets the boot state. APs stay in the in-kernel LAPIC's wait-for-SIPI.
func setupVCPU(cpu *kvm.VCPU, supported []kvm.CPUIDEntry, cpus int, pvm, tscDeadline bool, st *boot.CPUState) ([]uint32, error) {
	cpuid := kvm.ShapeCPUID(supported, kvm.CPUIDOptions{CPUs: cpus, APICID: cpu.ID(), PVM: pvm})
	tuneCPUID(cpuid, tscDeadline)
	if err := cpu.SetCPUID(cpuid); err != nil {
		return nil, err
	}
	skipped := setMSRs(cpu, bootMSRs())
	if err := setLINTs(cpu); err != nil {
		return nil, fmt.Errorf("vCPU %d: %w", cpu.ID(), err)
	}
	if st != nil {
		if err := setBootState(cpu, *st); err != nil {
			return nil, fmt.Errorf("vCPU %d boot state: %w", cpu.ID(), err)
		}
	}
	return skipped, nil
}
