package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// APIVersion is the only KVM API version there has ever been.
const APIVersion = 12

// System is an open /dev/kvm: the system-level ioctls.
type System struct {
	fd int
}

// Open opens /dev/kvm and checks the API version. Its error says what to do.
func Open() (*System, error) {
	fd, err := unix.Open(DevicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		h := Detect()
		if h.Why != "" {
			return nil, fmt.Errorf("%s", h.Why)
		}
		return nil, fmt.Errorf("cannot open %s: %v", DevicePath, err)
	}
	s := &System{fd: fd}
	v, err := s.APIVersion()
	if err != nil {
		s.Close()
		return nil, err
	}
	if v != APIVersion {
		s.Close()
		return nil, fmt.Errorf("%s speaks KVM API version %d, tinyvmm needs %d", DevicePath, v, APIVersion)
	}
	return s, nil
}

// Close closes /dev/kvm (VMs created from it stay valid).
func (s *System) Close() error { return unix.Close(s.fd) }

// APIVersion is KVM_GET_API_VERSION.
func (s *System) APIVersion() (int, error) {
	v, err := ioctlValue(s.fd, ioctlGetAPIVersion, 0)
	if err != nil {
		return 0, fmt.Errorf("KVM_GET_API_VERSION: %w", err)
	}
	return v, nil
}

// CheckExtension is KVM_CHECK_EXTENSION: 0 when the capability is absent,
// otherwise a capability-specific positive value.
func (s *System) CheckExtension(capability int) int {
	v, err := ioctlValue(s.fd, ioctlCheckExtension, uintptr(capability))
	if err != nil {
		return 0
	}
	return v
}

// VCPUMmapSize is KVM_GET_VCPU_MMAP_SIZE: the size of a vCPU's kvm_run mapping.
func (s *System) VCPUMmapSize() (int, error) {
	v, err := ioctlValue(s.fd, ioctlGetVCPUMmapSize, 0)
	if err != nil {
		return 0, fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	return v, nil
}

// SupportedCPUID is KVM_GET_SUPPORTED_CPUID: every leaf KVM can present to
// a guest, with the bits it can virtualise.
func (s *System) SupportedCPUID() ([]CPUIDEntry, error) {
	for n := 128; n <= 4096; n *= 2 {
		buf := newFlex[cpuid2Header, CPUIDEntry](n)
		buf.header().Nent = uint32(n)
		_, err := ioctl(s.fd, ioctlGetSupportedCPUID, buf.pointer())
		if err == unix.E2BIG {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("KVM_GET_SUPPORTED_CPUID: %w", err)
		}
		got := int(buf.header().Nent)
		if got > n {
			return nil, fmt.Errorf("KVM_GET_SUPPORTED_CPUID returned %d entries for a buffer of %d", got, n)
		}
		return append([]CPUIDEntry(nil), buf.entries()[:got]...), nil
	}
	return nil, fmt.Errorf("KVM_GET_SUPPORTED_CPUID: more than 4096 entries")
}

// MSRIndexList is KVM_GET_MSR_INDEX_LIST: the MSRs KVM saves and restores.
func (s *System) MSRIndexList() ([]uint32, error) {
	for n := 256; n <= 8192; n *= 2 {
		words := make([]uint32, 1+n)
		words[0] = uint32(n)
		_, err := ioctl(s.fd, ioctlGetMSRIndexList, unsafe.Pointer(&words[0]))
		if err == unix.E2BIG {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("KVM_GET_MSR_INDEX_LIST: %w", err)
		}
		got := int(words[0])
		if got > n {
			return nil, fmt.Errorf("KVM_GET_MSR_INDEX_LIST returned %d entries for %d", got, n)
		}
		return append([]uint32(nil), words[1:1+got]...), nil
	}
	return nil, fmt.Errorf("KVM_GET_MSR_INDEX_LIST: more than 8192 entries")
}

// CreateVM is KVM_CREATE_VM (machine type 0, the default x86 VM).
func (s *System) CreateVM() (*VM, error) {
	fd, err := ioctlValue(s.fd, ioctlCreateVM, 0)
	if err != nil {
		return nil, fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	unix.CloseOnExec(fd)
	size, err := s.VCPUMmapSize()
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &VM{fd: fd, sys: s, runSize: size}, nil
}
