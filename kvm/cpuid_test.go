package kvm

import "testing"

// hostLikeCPUID is a supported-CPUID table with every feature bit set, the
// worst case for hiding.
func hostLikeCPUID() []CPUIDEntry {
	all := ^uint32(0)
	return []CPUIDEntry{
		{Function: 0, EAX: 0xd, EBX: 0x756e6547},
		{Function: 1, EAX: 0x906ea, EBX: 0x00100800 | 7<<24, ECX: all &^ cpuid1ECXHypervisr, EDX: all},
		{Function: 4, Index: 0, Flags: CPUIDFlagSignificantIndex, EAX: 0xfc004121},
		{Function: 7, Index: 0, Flags: CPUIDFlagSignificantIndex, EBX: all, ECX: all, EDX: all},
		{Function: 7, Index: 1, Flags: CPUIDFlagSignificantIndex, EAX: all},
		{Function: 0xb, Index: 0, Flags: CPUIDFlagSignificantIndex, EAX: 1, EBX: 2, ECX: 0x100},
		{Function: 0xb, Index: 1, Flags: CPUIDFlagSignificantIndex, EAX: 4, EBX: 8, ECX: 0x201},
		{Function: 0xb, Index: 2, Flags: CPUIDFlagSignificantIndex, ECX: 2},
		{Function: 0xd, Index: 0, Flags: CPUIDFlagSignificantIndex, EAX: 7, EBX: 0x340, ECX: 0x340},
		{Function: 0x80000001, ECX: all, EDX: all},
		{Function: 0x80000008, EAX: 0x3030, ECX: 0x7007},
	}
}

func mustLeaf(t *testing.T, es []CPUIDEntry, fn, idx uint32) CPUIDEntry {
	t.Helper()
	e, ok := Leaf(es, fn, idx)
	if !ok {
		t.Fatalf("leaf %#x.%d missing", fn, idx)
	}
	return e
}

func TestShapeCPUIDTopologyAndHypervisorBit(t *testing.T) {
	sup := hostLikeCPUID()
	out := ShapeCPUID(sup, CPUIDOptions{CPUs: 3, APICID: 2})
	l1 := mustLeaf(t, out, 1, 0)
	if l1.ECX&cpuid1ECXHypervisr == 0 {
		t.Error("hypervisor bit not set")
	}
	if got := l1.EBX >> 24; got != 2 {
		t.Errorf("leaf 1 APIC ID %d, want 2", got)
	}
	if got := l1.EBX >> 16 & 0xff; got != 3 {
		t.Errorf("leaf 1 logical count %d, want 3", got)
	}
	if l1.EBX&0xffff != 0x0800 {
		t.Errorf("leaf 1 EBX low half changed: %#x", l1.EBX)
	}
	if l1.EDX&cpuid1EDXHTT == 0 {
		t.Error("HTT clear with 3 CPUs")
	}
	if l1.ECX&cpuid1ECXXSAVE == 0 {
		t.Error("XSAVE hidden without PVM")
	}
	if got := mustLeaf(t, out, 4, 0).EAX >> 26; got != 2 {
		t.Errorf("leaf 4 cores-1 = %d, want 2", got)
	}
	smt, core, end := mustLeaf(t, out, 0xb, 0), mustLeaf(t, out, 0xb, 1), mustLeaf(t, out, 0xb, 2)
	if smt.EBX != 1 || smt.EAX != 0 || smt.ECX != 0x100 || smt.EDX != 2 {
		t.Errorf("leaf 0xb.0 = %+v", smt)
	}
	if core.EBX != 3 || core.EAX != 2 || core.ECX != 0x201 || core.EDX != 2 {
		t.Errorf("leaf 0xb.1 = %+v", core)
	}
	if end.ECX>>8&0xff != 0 || end.EDX != 2 {
		t.Errorf("leaf 0xb.2 = %+v", end)
	}
	if got := mustLeaf(t, out, 0x80000008, 0).ECX; got&0xff != 2 || got>>12&0xf != 2 {
		t.Errorf("leaf 0x80000008 ECX = %#x", got)
	}
	if sup[1].ECX&cpuid1ECXHypervisr != 0 {
		t.Error("ShapeCPUID modified its input")
	}
	one := ShapeCPUID(sup, CPUIDOptions{CPUs: 1})
	if mustLeaf(t, one, 1, 0).EDX&cpuid1EDXHTT != 0 {
		t.Error("HTT set with one CPU")
	}
}

func TestShapeCPUIDHidesWhatPVMCannotRun(t *testing.T) {
	out := ShapeCPUID(hostLikeCPUID(), CPUIDOptions{CPUs: 1, PVM: true})
	l1 := mustLeaf(t, out, 1, 0)
	for name, bit := range map[string]uint32{
		"CX16": cpuid1ECXCX16, "XSAVE": cpuid1ECXXSAVE, "OSXSAVE": cpuid1ECXOSXSAVE, "AVX": cpuid1ECXAVX,
		"POPCNT": cpuid1ECXPOPCNT, "SSSE3": cpuid1ECXSSSE3, "SSE4.1": cpuid1ECXSSE41, "SSE4.2": cpuid1ECXSSE42,
		"PCLMULQDQ": cpuid1ECXPCLMULQDQ, "AES": cpuid1ECXAES, "PCID": cpuid1ECXPCID, "FMA": cpuid1ECXFMA,
	} {
		if l1.ECX&bit != 0 {
			t.Errorf("leaf 1 %s still set under PVM", name)
		}
	}
	if l1.ECX&cpuid1ECXHypervisr == 0 || l1.ECX&1 == 0 {
		t.Errorf("leaf 1 ECX lost bits it should keep: %#x", l1.ECX)
	}
	l7 := mustLeaf(t, out, 7, 0)
	for name, bit := range map[string]uint32{
		"SMAP": cpuid7EBXSMAP, "FSGSBASE": cpuid7EBXFSGSBASE, "INVPCID": cpuid7EBXINVPCID, "BMI2": cpuid7EBXBMI2,
		"ADX": cpuid7EBXADX, "SHA": cpuid7EBXSHA, "AVX2": cpuid7EBXAVX2, "AVX512F": 1 << 16,
	} {
		if l7.EBX&bit != 0 {
			t.Errorf("leaf 7 %s still set under PVM", name)
		}
	}
	if l7.EBX&(1<<7) == 0 {
		t.Error("SMEP hidden; only SMAP should go")
	}
	if l7.EDX&cpuid7EDXSERIALIZE != 0 {
		t.Error("SERIALIZE still set under PVM")
	}
	if d := mustLeaf(t, out, 0xd, 0); d.EAX|d.EBX|d.ECX|d.EDX != 0 {
		t.Errorf("XSAVE leaf 0xd not cleared: %+v", d)
	}
	if got := mustLeaf(t, out, 7, 1).EAX & cpuid71EAXNeedsXSAVE; got != 0 {
		t.Errorf("leaf 7.1 AVX bits %#x", got)
	}
}
