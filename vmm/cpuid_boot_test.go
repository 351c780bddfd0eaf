package vmm

import (
	"testing"

	"tinyvmm/kvm"
)

func TestTuneCPUID(t *testing.T) {
	in := []kvm.CPUIDEntry{
		{Function: 1, ECX: cpuid1ECXVMX | 1<<0, EDX: 7},
		{Function: 0x80000001, ECX: cpuidExt1ECXSVM | 1<<0},
		{Function: 7, ECX: cpuid1ECXTSCDeadline}, // another leaf's bit 24 is left alone
	}
	with := append([]kvm.CPUIDEntry(nil), in...)
	tuneCPUID(with, true)
	if with[0].ECX != 1<<0|cpuid1ECXTSCDeadline || with[0].EDX != 7 {
		t.Errorf("leaf 1 ECX %#x EDX %#x: want VMX off, TSC-deadline on, the rest kept", with[0].ECX, with[0].EDX)
	}
	if with[1].ECX != 1<<0 {
		t.Errorf("leaf 0x80000001 ECX %#x: want SVM off, the rest kept", with[1].ECX)
	}
	if with[2].ECX != cpuid1ECXTSCDeadline {
		t.Errorf("leaf 7 changed: %#x", with[2].ECX)
	}
	without := append([]kvm.CPUIDEntry(nil), in...)
	tuneCPUID(without, false)
	if without[0].ECX&cpuid1ECXTSCDeadline != 0 {
		t.Error("TSC-deadline advertised although KVM lacks the capability")
	}
}
