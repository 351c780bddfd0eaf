// Package kvm is a thin, typed layer over the /dev/kvm ioctls tinyvmm
// needs, on golang.org/x/sys/unix: the system fd (System), a VM (VM:
// memory slots, in-kernel irqchip and PIT, ioeventfd, irqfd, GSI routing,
// MSI), and vCPUs (VCPU: Run with exit decoding, registers, CPUID, MSRs,
// LAPIC, MP state). Struct layouts mirror the kernel ABI byte for byte and
// the ioctl numbers are computed from their sizes; abi_test.go checks both
// against <linux/kvm.h>. It holds no policy beyond ShapeCPUID, which
// presents KVM's supported CPUID to a guest (and hides what PVM's emulator
// cannot run). Detect says once whether KVM is usable here, and whether it
// is PVM.
package kvm
