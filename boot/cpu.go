package boot

// Control register and EFER bits.
const (
	cr0PE = 1 << 0
	cr0MP = 1 << 1
	cr0ET = 1 << 4
	cr0NE = 1 << 5
	cr0WP = 1 << 16
	cr0PG = 1 << 31

	cr4PAE        = 1 << 5
	cr4OSFXSR     = 1 << 9
	cr4OSXMMEXCPT = 1 << 10

	eferLME = 1 << 8
	eferLMA = 1 << 10

	rflagsFixed = 1 << 1 // always set
	rflagsIOPL3 = 3 << 12
)

// longModeState is the 64-bit boot protocol's entry state: long mode,
// paging on through cr3, __BOOT_CS/__BOOT_DS, RSI = boot_params.
func longModeState(entry, rsi, cr3 uint64, gdtLimit uint16) CPUState {
	return CPUState{
		RIP: entry, RSP: bootStackTop, RSI: rsi, RFLAGS: rflagsFixed,
		CR0: cr0PE | cr0ET | cr0NE | cr0PG, CR3: cr3, CR4: cr4PAE, EFER: eferLME | eferLMA,
		CS: segCode64, DS: segData, ES: segData, FS: segData, GS: segData, SS: segData,
		TR: tssSegment(0, tssMinLimit), LDT: segLDT,
		GDTBase: gdtAddr, GDTLimit: gdtLimit,
	}
}

// pvhState is the PVH entry state: 32-bit protected mode, paging off, flat
// segments, a 32-bit TSS at 0 of 0x68 bytes, EBX = hvm_start_info.
func pvhState(entry, rbx uint64, gdtLimit uint16) CPUState {
	return CPUState{
		RIP: entry, RSP: bootStackTop, RBX: rbx, RFLAGS: rflagsFixed,
		CR0: cr0PE | cr0ET,
		CS:  segCode32, DS: segData, ES: segData, FS: segData, GS: segData, SS: segData,
		TR: tssSegment(0, tssMinLimit), LDT: segLDT,
		GDTBase: gdtAddr, GDTLimit: gdtLimit,
	}
}
