package kvm

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Host describes the machine's KVM, detected once. Tests and benchmarks ask
// it instead of probing /dev/kvm themselves.
type Host struct {
	// Usable is true when /dev/kvm opens read-write.
	Usable bool
	// PVM is true when the host's KVM is the kvm_pvm module: guest CPL0 code
	// runs in KVM's instruction emulator (CONTRIBUTING.md describes PVM).
	PVM bool
	// Why says, in one line, why KVM is not usable (empty when it is).
	Why string
}

// DevicePath is the KVM device node.
const DevicePath = "/dev/kvm"

var (
	hostOnce sync.Once
	host     Host
)

// Detect returns the host's KVM situation, probing only on the first call.
func Detect() Host {
	hostOnce.Do(func() { host = probe() })
	return host
}

func probe() Host {
	h := Host{}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		h.PVM = true
	}
	fd, err := unix.Open(DevicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		h.Usable = true
	case errors.Is(err, unix.ENOENT):
		h.Why = "no " + DevicePath + " on this machine (load kvm_intel or kvm_amd, or enable nested virtualization)"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		h.Why = fmt.Sprintf("cannot open %s: permission denied (add your user to the kvm group or run as root)", DevicePath)
	default:
		h.Why = fmt.Sprintf("cannot open %s: %v", DevicePath, err)
	}
	return h
}

// String is the one line tinyvmm prints about the host at start.
func (h Host) String() string {
	switch {
	case !h.Usable:
		return "KVM unusable: " + h.Why
	case h.PVM:
		return "host KVM is PVM (kvm_pvm): guest kernel code runs in KVM's instruction emulator, about 1000x slower; hiding the CPU features it cannot run"
	default:
		return "host KVM is hardware virtualization"
	}
}
