// Package guest holds what runs inside a tinyvmm guest and how it is made:
// the kernel build (kernel/), the Go /init (init/), the initramfs writer
// (initramfs/) and the no-syscall /init of the kernel-only guest (pause/).
// `bash guest/build.sh` builds it all into out/guest/. The tests in this
// package boot those artifacts under QEMU TCG, which needs no KVM.
//
// It imports nothing of the host side (kvm, devices, vmm, virtionet).
package guest
