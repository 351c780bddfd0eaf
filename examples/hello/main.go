// Command hello is the smallest virtual machine tinyvmm's kvm package can
// make: one page of guest memory, one vCPU in real mode, three instructions
// (2 + 3, then HLT), and the exit that tells the VMM the guest halted.
//
//	go run ./examples/hello
//
// It is stage 1 of GUIDE.md; the steps are those of LWN's "Using the KVM
// API" (2015), each a kvm package call over one ioctl.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"tinyvmm/kvm"
)

const (
	memSize = 0x1000 // one page of guest RAM at guest physical address 0
	codeAt  = 0x0100 // where the code goes, and where the vCPU starts
	// tssAt is three pages Intel VMX needs for real mode, away from RAM.
	tssAt = 0xfffbd000
)

// code is 16-bit real-mode machine code.
var code = []byte{
	0xb8, 0x02, 0x00, // mov ax, 2
	0x83, 0xc0, 0x03, // add ax, 3
	0xf4, // hlt
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

// run makes the VM, runs it to its HLT and reports what the guest left in
// its registers.
func run(out io.Writer) error {
	if h := kvm.Detect(); !h.Usable {
		return fmt.Errorf("%s", h.Why)
	}
	// A vCPU belongs to the thread that runs it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	sys, err := kvm.Open() // open("/dev/kvm"), KVM_GET_API_VERSION
	if err != nil {
		return err
	}
	defer sys.Close()
	version, err := sys.APIVersion()
	if err != nil {
		return err
	}
	vm, err := sys.CreateVM() // KVM_CREATE_VM
	if err != nil {
		return err
	}
	defer vm.Close()
	if err := vm.SetTSSAddr(tssAt); err != nil {
		return err
	}

	// Guest RAM is ordinary anonymous memory of this process, handed to
	// KVM as memory slot 0 (KVM_SET_USER_MEMORY_REGION).
	mem, err := unix.Mmap(-1, 0, memSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	copy(mem[codeAt:], code)
	if err := vm.SetUserMemoryRegion(0, 0, mem, 0); err != nil {
		return err
	}

	cpu, err := vm.CreateVCPU(0) // KVM_CREATE_VCPU, and mmap of its kvm_run
	if err != nil {
		return err
	}
	defer cpu.Close()
	// A new vCPU is in real mode at the reset vector (CS base 0xffff0000);
	// point CS at 0 and RIP at the code.
	sregs, err := cpu.Sregs()
	if err != nil {
		return err
	}
	sregs.CS.Base, sregs.CS.Selector = 0, 0
	if err := cpu.SetSregs(sregs); err != nil {
		return err
	}
	if err := cpu.SetRegs(kvm.Regs{RIP: codeAt, RFLAGS: 2}); err != nil { // bit 1 of RFLAGS is always set
		return err
	}
	fmt.Fprintf(out, "KVM API version %d; VM with %d bytes of RAM and one vCPU at RIP %#x\n", version, memSize, codeAt)

	// KVM_RUN enters the guest and returns at the first thing the VMM must
	// handle: for this guest, its HLT (stage 2 turns this into a loop).
	reason, err := cpu.Run()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "KVM_RUN returned: %v\n", reason)
	if reason != kvm.ExitHLT {
		return fmt.Errorf("unexpected exit %v", reason)
	}
	regs, err := cpu.Regs()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the guest computed 2 + 3 = %d (AX) and halted at RIP %#x\n", regs.RAX&0xffff, regs.RIP)
	return nil
}
