package vmm

import "tinyvmm/kvm"

// capTSCDeadlineTimer is KVM_CAP_TSC_DEADLINE_TIMER: the in-kernel LAPIC
// runs the TSC-deadline timer mode. KVM reports it as a capability, not in
// its supported CPUID, so a VMM sets the CPUID bit itself (QEMU does).
const capTSCDeadlineTimer = 72

// CPUID bits tinyvmm sets or clears for a faster boot.
const (
	cpuid1ECXVMX         = 1 << 5
	cpuid1ECXTSCDeadline = 1 << 24
	cpuidExt1ECXSVM      = 1 << 2
)

// tuneCPUID shapes what costs Linux boot time without giving the guest
// anything a tinyvmm guest uses:
//   - the TSC-deadline timer: with it Linux skips calibrating the LAPIC
//     timer, which waits HZ/10 timer ticks (100 ms at HZ=100, and far
//     longer in nested L1 where ticks are slow);
//   - no VMX or SVM: a guest kernel with KVM built in (ours, since it
//     doubles as the nested L1) otherwise sets up KVM at boot (svm_init
//     took 217 ms of a 1.7 s boot in L2). tinyvmm offers no nested
//     virtualization.
func tuneCPUID(entries []kvm.CPUIDEntry, tscDeadline bool) {
	for i := range entries {
		e := &entries[i]
		switch e.Function {
		case 1:
			e.ECX &^= cpuid1ECXVMX
			if tscDeadline {
				e.ECX |= cpuid1ECXTSCDeadline
			}
		case 0x80000001:
			e.ECX &^= cpuidExt1ECXSVM
		}
	}
}
