package kvm

import "math/bits"

// CPUIDOptions says how to shape KVM's supported CPUID for one vCPU.
type CPUIDOptions struct {
	CPUs   int  // vCPUs in the VM: one package, one core per vCPU, no SMT
	APICID int  // this vCPU's APIC ID
	PVM    bool // hide what PVM's instruction emulator cannot run
}

// CPUID feature bits tinyvmm touches, by leaf and register.
const (
	// Leaf 1 ECX.
	cpuid1ECXPCLMULQDQ = 1 << 1
	cpuid1ECXSSSE3     = 1 << 9
	cpuid1ECXFMA       = 1 << 12
	cpuid1ECXCX16      = 1 << 13
	cpuid1ECXPCID      = 1 << 17
	cpuid1ECXSSE41     = 1 << 19
	cpuid1ECXSSE42     = 1 << 20
	cpuid1ECXPOPCNT    = 1 << 23
	cpuid1ECXAES       = 1 << 25
	cpuid1ECXXSAVE     = 1 << 26
	cpuid1ECXOSXSAVE   = 1 << 27
	cpuid1ECXAVX       = 1 << 28
	cpuid1ECXF16C      = 1 << 29
	cpuid1ECXHypervisr = 1 << 31
	// Leaf 1 EDX.
	cpuid1EDXHTT = 1 << 28

	// Leaf 7 subleaf 0 EBX.
	cpuid7EBXFSGSBASE = 1 << 0
	cpuid7EBXAVX2     = 1 << 5
	cpuid7EBXBMI2     = 1 << 8
	cpuid7EBXINVPCID  = 1 << 10
	cpuid7EBXMPX      = 1 << 14
	cpuid7EBXADX      = 1 << 19
	cpuid7EBXSMAP     = 1 << 20
	cpuid7EBXSHA      = 1 << 29
	// AVX-512 F, DQ, IFMA, PF, ER, CD, BW, VL: all need XSAVE state.
	cpuid7EBXAVX512 = 1<<16 | 1<<17 | 1<<21 | 1<<26 | 1<<27 | 1<<28 | 1<<30 | 1<<31
	// Leaf 7 subleaf 0 ECX: AVX512_VBMI, PKU, OSPKE, AVX512_VBMI2, CET_SS,
	// GFNI, VAES, VPCLMULQDQ, AVX512_VNNI, AVX512_BITALG, AVX512_VPOPCNTDQ.
	cpuid7ECXNeedsXSAVEOrSIMD = 1<<1 | 1<<3 | 1<<4 | 1<<6 | 1<<7 | 1<<8 | 1<<9 | 1<<10 | 1<<11 | 1<<12 | 1<<14
	// Leaf 7 subleaf 0 EDX: AVX512_4VNNIW, AVX512_4FMAPS, SERIALIZE, CET_IBT,
	// AMX_BF16, AVX512_FP16, AMX_TILE, AMX_INT8.
	cpuid7EDXSERIALIZE        = 1 << 14
	cpuid7EDXNeedsXSAVEOrSIMD = 1<<2 | 1<<3 | 1<<20 | 1<<22 | 1<<23 | 1<<24 | 1<<25
	// Leaf 7 subleaf 1 EAX: AVX_VNNI, AVX512_BF16.
	cpuid71EAXNeedsXSAVE = 1<<4 | 1<<5

	// Leaf 0x80000001 ECX: SSE4A, XOP, FMA4, TBM (AMD SIMD extensions).
	cpuidExt1ECXSIMD = 1<<6 | 1<<11 | 1<<16 | 1<<21
)

// hidePVM clears, per leaf/subleaf register, the bits PVM's emulator
// cannot execute in guest kernel code (see shared PVM notes): CX16, XSAVE
// and everything needing XSAVE state (AVX...), SMAP (clac/stac), POPCNT,
// SSSE3/SSE4 and the SIMD crypto, BMI2, ADX, and as a precaution FSGSBASE,
// PCID, INVPCID, SERIALIZE. The kvm_pvm measured here answers a guest's
// CPUID with the host's bits whatever this table says, so the VMM also
// clears these on the kernel command line (clearcpuid=); the table still
// matters to a PVM that honours KVM_SET_CPUID2.
func hidePVM(e *CPUIDEntry) {
	switch {
	case e.Function == 1:
		e.ECX &^= cpuid1ECXPCLMULQDQ | cpuid1ECXSSSE3 | cpuid1ECXFMA | cpuid1ECXCX16 | cpuid1ECXPCID |
			cpuid1ECXSSE41 | cpuid1ECXSSE42 | cpuid1ECXPOPCNT | cpuid1ECXAES | cpuid1ECXXSAVE |
			cpuid1ECXOSXSAVE | cpuid1ECXAVX | cpuid1ECXF16C
	case e.Function == 7 && e.Index == 0:
		e.EBX &^= cpuid7EBXFSGSBASE | cpuid7EBXAVX2 | cpuid7EBXBMI2 | cpuid7EBXINVPCID | cpuid7EBXMPX |
			cpuid7EBXADX | cpuid7EBXSMAP | cpuid7EBXSHA | cpuid7EBXAVX512
		e.ECX &^= cpuid7ECXNeedsXSAVEOrSIMD
		e.EDX &^= cpuid7EDXSERIALIZE | cpuid7EDXNeedsXSAVEOrSIMD
	case e.Function == 7 && e.Index == 1:
		e.EAX &^= cpuid71EAXNeedsXSAVE
	case e.Function == 0xd:
		// No XSAVE: the state-component leaf describes nothing.
		e.EAX, e.EBX, e.ECX, e.EDX = 0, 0, 0, 0
	case e.Function == 0x80000001:
		e.ECX &^= cpuidExt1ECXSIMD
	}
}

// ShapeCPUID returns the CPUID table for one vCPU, from KVM's supported
// CPUID: the hypervisor bit set, the topology of opts.CPUs single-core
// vCPUs in one package, this vCPU's APIC ID, and under PVM the features its
// emulator cannot run hidden. supported is not modified.
func ShapeCPUID(supported []CPUIDEntry, opts CPUIDOptions) []CPUIDEntry {
	cpus := opts.CPUs
	if cpus < 1 {
		cpus = 1
	}
	apicID := uint32(opts.APICID)
	// Bits of APIC ID that number the cores within the package.
	coreBits := uint32(bits.Len(uint(cpus - 1)))

	out := make([]CPUIDEntry, 0, len(supported))
	for _, e := range supported {
		switch e.Function {
		case 1:
			e.ECX |= cpuid1ECXHypervisr
			// EBX: [31:24] initial APIC ID, [23:16] logical processors per package.
			e.EBX = e.EBX&0x0000ffff | apicID<<24 | uint32(cpus)<<16
			if cpus > 1 {
				e.EDX |= cpuid1EDXHTT
			} else {
				e.EDX &^= cpuid1EDXHTT
			}
		case 4:
			// Deterministic cache parameters: EAX[31:26] = cores per package - 1,
			// EAX[25:14] = logical processors sharing this cache - 1 (one per core).
			if e.EAX&0x1f != 0 {
				e.EAX = e.EAX&0x3fff | uint32(cpus-1)<<26
			}
		case 0xb, 0x1f:
			// Extended topology: level 0 is SMT (1 thread per core), level 1
			// the cores of the package, then the invalid level that ends it.
			switch e.Index {
			case 0:
				e.EAX, e.EBX, e.ECX = 0, 1, 1<<8
			case 1:
				e.EAX, e.EBX, e.ECX = coreBits, uint32(cpus), 2<<8|1
			default:
				e.EAX, e.EBX, e.ECX = 0, 0, e.Index
			}
			e.EDX = apicID
		case 0x80000008:
			// AMD: ECX[15:12] APIC ID bits for cores, [7:0] cores - 1.
			e.ECX = e.ECX&^0xf0ff | coreBits<<12 | uint32(cpus-1)
		}
		if opts.PVM {
			hidePVM(&e)
		}
		out = append(out, e)
	}
	return out
}

// Leaf returns the entry for function/index, if present.
func Leaf(entries []CPUIDEntry, function, index uint32) (CPUIDEntry, bool) {
	for _, e := range entries {
		if e.Function == function && (e.Flags&CPUIDFlagSignificantIndex == 0 || e.Index == index) {
			return e, true
		}
	}
	return CPUIDEntry{}, false
}
