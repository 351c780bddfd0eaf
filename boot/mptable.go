package boot

import (
	"encoding/binary"
	"fmt"
)

// MP table (Intel MultiProcessor Specification 1.4). Linux without ACPI
// finds the application processors and the IO APIC through it.
const (
	mpIOAPICAddr   = 0xfec00000
	mpLAPICAddr    = 0xfee00000
	mpLAPICVersion = 0x14 // what KVM's local APIC reports
	mpIOAPICVer    = 0x11 // what KVM's IO APIC reports
	mpMaxCPUs      = 254  // APIC IDs 0..n-1, the IO APIC takes n, 0xff is broadcast
	mpISAIRQs      = 16

	mpFloatLen     = 16
	mpHeaderLen    = 44
	mpCPUEntryLen  = 20
	mpSmallEntLen  = 8
	mpEntryCPU     = 0
	mpEntryBus     = 1
	mpEntryIOAPIC  = 2
	mpEntryIOInt   = 3
	mpEntryLocInt  = 4
	mpIntINT       = 0
	mpIntNMI       = 1
	mpIntExtINT    = 3
	mpCPUEnabled   = 1
	mpCPUBoot      = 2
	mpIOAPICUsable = 1
	mpBusISA       = 0
)

// mpTableSize is the size of the floating pointer and configuration table
// for n CPUs.
func mpTableSize(n int) int {
	return mpFloatLen + mpHeaderLen + n*mpCPUEntryLen + (1+1+mpISAIRQs+2)*mpSmallEntLen
}

// writeMPTable writes the floating pointer at mpTableAddr and the
// configuration table right after it.
func writeMPTable(mem []byte, cpus int) error {
	if cpus < 1 || cpus > mpMaxCPUs {
		return fmt.Errorf("boot: %d CPUs asked; tinyvmm supports 1 to %d", cpus, mpMaxCPUs)
	}
	t := mem[mpTableAddr : mpTableAddr+mpTableSize(cpus)]
	clear(t)
	le := binary.LittleEndian
	cfgAddr := uint32(mpTableAddr + mpFloatLen)
	ioapicID := uint8(cpus)

	// The configuration table: header, then entries in the spec's order.
	cfg := t[mpFloatLen:]
	copy(cfg[0:], "PCMP")
	le.PutUint16(cfg[4:], uint16(len(cfg)))
	cfg[6] = 4 // spec revision 1.4
	copy(cfg[8:16], "TINYVMM ")
	copy(cfg[16:28], "TINYVMM 1.0 ")
	le.PutUint16(cfg[34:], uint16(cpus+1+1+mpISAIRQs+2))
	le.PutUint32(cfg[36:], mpLAPICAddr)
	e := cfg[mpHeaderLen:]
	for id := 0; id < cpus; id++ {
		e[0] = mpEntryCPU
		e[1] = uint8(id)
		e[2] = mpLAPICVersion
		e[3] = mpCPUEnabled
		if id == 0 {
			e[3] |= mpCPUBoot
		}
		le.PutUint32(e[4:], 0x600)     // signature: family 6
		le.PutUint32(e[8:], 1<<9|1<<0) // features: APIC, FPU
		e = e[mpCPUEntryLen:]
	}
	e[0], e[1] = mpEntryBus, mpBusISA
	copy(e[2:8], "ISA   ")
	e = e[mpSmallEntLen:]
	e[0], e[1], e[2], e[3] = mpEntryIOAPIC, ioapicID, mpIOAPICVer, mpIOAPICUsable
	le.PutUint32(e[4:], mpIOAPICAddr)
	e = e[mpSmallEntLen:]
	for irq := uint8(0); irq < mpISAIRQs; irq++ {
		// ISA IRQ n on IO APIC pin n, polarity and trigger as the bus says.
		e[0], e[1], e[4], e[5], e[6], e[7] = mpEntryIOInt, mpIntINT, mpBusISA, irq, ioapicID, irq
		e = e[mpSmallEntLen:]
	}
	// The PIC on the BSP's LINT0 and NMI on every CPU's LINT1, as boards wire it.
	e[0], e[1], e[4], e[5], e[6], e[7] = mpEntryLocInt, mpIntExtINT, mpBusISA, 0, 0, 0
	e = e[mpSmallEntLen:]
	e[0], e[1], e[4], e[5], e[6], e[7] = mpEntryLocInt, mpIntNMI, mpBusISA, 0, 0xff, 1
	cfg[7] = -sum(cfg)

	// The floating pointer: one 16-byte paragraph, default configuration 0.
	f := t[:mpFloatLen]
	copy(f[0:], "_MP_")
	le.PutUint32(f[4:], cfgAddr)
	f[8] = 1 // length in paragraphs
	f[9] = 4 // spec revision 1.4
	f[10] = -sum(f)
	return nil
}

func sum(b []byte) uint8 {
	var s uint8
	for _, c := range b {
		s += c
	}
	return s
}
