package kvm

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctl numbers are computed the way <asm-generic/ioctl.h> does, from
// the struct sizes, so a wrong struct size shows up as a wrong number in
// the tests rather than as EINVAL on someone's machine.

const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2

	kvmio = 0xAE
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | kvmio<<8 | nr
}
func io(nr uintptr) uintptr         { return ioc(iocNone, nr, 0) }
func ior(nr, size uintptr) uintptr  { return ioc(iocRead, nr, size) }
func iow(nr, size uintptr) uintptr  { return ioc(iocWrite, nr, size) }
func iowr(nr, size uintptr) uintptr { return ioc(iocRead|iocWrite, nr, size) }
func sizeOf[T any]() uintptr        { var v T; return unsafe.Sizeof(v) }

// System ioctls (on the /dev/kvm fd).
var (
	ioctlGetAPIVersion     = io(0x00)
	ioctlCreateVM          = io(0x01)
	ioctlGetMSRIndexList   = iowr(0x02, 4)
	ioctlCheckExtension    = io(0x03)
	ioctlGetVCPUMmapSize   = io(0x04)
	ioctlGetSupportedCPUID = iowr(0x05, sizeOf[cpuid2Header]())
)

// VM ioctls.
var (
	ioctlCreateVCPU          = io(0x41)
	ioctlSetUserMemoryRegion = iow(0x46, sizeOf[UserspaceMemoryRegion]())
	ioctlSetTSSAddr          = io(0x47)
	ioctlSetIdentityMapAddr  = iow(0x48, 8)
	ioctlCreateIRQChip       = io(0x60)
	ioctlIRQLine             = iow(0x61, sizeOf[irqLevel]())
	ioctlSetGSIRouting       = iow(0x6a, sizeOf[irqRoutingHeader]())
	ioctlIRQFD               = iow(0x76, sizeOf[irqfd]())
	ioctlCreatePIT2          = iow(0x77, sizeOf[pitConfig]())
	ioctlIoeventfd           = iow(0x79, sizeOf[ioeventfd]())
	ioctlSignalMSI           = iow(0xa5, sizeOf[msi]())
)

// vCPU ioctls.
var (
	ioctlRun        = io(0x80)
	ioctlGetRegs    = ior(0x81, sizeOf[Regs]())
	ioctlSetRegs    = iow(0x82, sizeOf[Regs]())
	ioctlGetSregs   = ior(0x83, sizeOf[Sregs]())
	ioctlSetSregs   = iow(0x84, sizeOf[Sregs]())
	ioctlGetMSRs    = iowr(0x88, sizeOf[msrsHeader]())
	ioctlSetMSRs    = iow(0x89, sizeOf[msrsHeader]())
	ioctlGetFPU     = ior(0x8c, sizeOf[FPU]())
	ioctlSetFPU     = iow(0x8d, sizeOf[FPU]())
	ioctlGetLAPIC   = ior(0x8e, sizeOf[LAPICState]())
	ioctlSetLAPIC   = iow(0x8f, sizeOf[LAPICState]())
	ioctlSetCPUID2  = iow(0x90, sizeOf[cpuid2Header]())
	ioctlGetCPUID2  = iowr(0x91, sizeOf[cpuid2Header]())
	ioctlGetMPState = ior(0x98, sizeOf[MPState]())
	ioctlSetMPState = iow(0x99, sizeOf[MPState]())
)

// ioctl issues one ioctl whose argument is a pointer, retrying EINTR (Go's
// preemption signal lands on any thread). Taking unsafe.Pointer and
// converting inside the Syscall call keeps the pointee alive and in place.
// KVM_RUN has its own loop in vcpu.go.
func ioctl(fd int, req uintptr, arg unsafe.Pointer) (int, error) {
	for {
		r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return int(r), e
		}
		return int(r), nil
	}
}

// ioctlValue issues an ioctl whose argument is a plain number.
func ioctlValue(fd int, req, arg uintptr) (int, error) {
	for {
		r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return int(r), e
		}
		return int(r), nil
	}
}
