// Command kvmprobe checks that /dev/kvm can run a guest, with raw ioctls and
// nothing of tinyvmm, so a failure points at the host (or the nested L1), not
// at the VMM. It runs a few bytes of real-mode code that does `out` to two
// ports and `hlt`, prints every distinct exit, and times a loop of port-I/O
// exits: the KVM_RUN round trip on this host.
//
// The harness runs it first inside the nested L1; it also runs anywhere with
// a /dev/kvm: go run ./test/nested/kvmprobe -exits 10000
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl numbers from linux/kvm.h (type 0xAE).
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84
)

// Exit reasons and kvm_run offsets used here.
const (
	exitIO       = 2
	exitHLT      = 5
	exitShutdown = 8
	exitFailEntr = 9
	exitInternal = 17

	runExitReason = 8  // __u32 exit_reason
	runIO         = 32 // struct kvm_run.io: direction u8, size u8, port u16, count u32, data_offset u64
)

const (
	codeAddr = 0x1000
	memSize  = 0x10000
	greetIO  = 0x10 // two writes: 'A', 'B'
	loopIO   = 0x11 // the timed loop
)

// guestCode is 16-bit real-mode code; the loop count is patched in at loopCountOffset.
var guestCode = []byte{
	0xB0, 'A', // mov al, 'A'
	0xBA, greetIO, 0x00, // mov dx, 0x10
	0xEE,       // out dx, al
	0xFE, 0xC0, // inc al
	0xEE,             // out dx, al
	0xB9, 0x00, 0x00, // mov cx, N (patched)
	0xE6, loopIO, // loop: out 0x11, al
	0x49,       // dec cx
	0x75, 0xFB, // jnz loop
	0xF4, // hlt
}

const loopCountOffset = 10

func main() {
	exits := flag.Int("exits", 10000, "port-I/O exits to time (1..65535)")
	deadline := flag.Duration("deadline", 5*time.Minute, "give up when the probe has not finished by then")
	flag.BoolVar(&stamp, "stamp", false, "print the wall clock of the first KVM_RUN (tinyvmm bench boot's floor)")
	flag.Parse()
	go func() {
		time.Sleep(*deadline)
		fail(fmt.Sprintf("not finished after %v (stuck after the last step printed)", *deadline))
	}()
	if *exits < 1 || *exits > 65535 {
		fail("-exits must be between 1 and 65535")
	}
	if err := probe(uint16(*exits)); err != nil {
		fail(err.Error())
	}
	fmt.Println("KVMPROBE OK")
}

func fail(msg string) {
	fmt.Println("KVMPROBE FAIL:", msg)
	os.Exit(1)
}

var started = time.Now()

// stamp: print "KVMPROBE first KVM_RUN unix-ns N" as the first KVM_RUN
// starts, on the clock and at the point tinyvmm --stats uses, so that
// `tinyvmm bench boot --floor` can show the least a Go VMM needs from its
// spawn to that KVM_RUN beside tinyvmm's own set-up.
var stamp bool

// step prints progress with the time since start: under emulation a stuck
// ioctl shows as the last line.
func step(what string) {
	fmt.Printf("kvmprobe: %s done at %.2fs\n", what, time.Since(started).Seconds())
}

func ioctl(fd int, req uintptr, arg uintptr) (uintptr, error) {
	for {
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
		if errno == unix.EINTR {
			continue // Go's preemption signals interrupt KVM_RUN
		}
		if errno != 0 {
			return r, errno
		}
		return r, nil
	}
}

func probe(loops uint16) error {
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %v", err)
	}
	version, err := ioctl(kvm, kvmGetAPIVersion, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_API_VERSION: %v", err)
	}
	fmt.Println("KVM API version", version)

	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %v", err)
	}
	vm := int(vmfd)
	step("KVM_CREATE_VM")

	mem, err := unix.Mmap(-1, 0, memSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mmap guest memory: %v", err)
	}
	code := append([]byte(nil), guestCode...)
	binary.LittleEndian.PutUint16(code[loopCountOffset:], loops)
	copy(mem[codeAddr:], code)

	region := struct {
		slot, flags            uint32
		guestPhys, size, uaddr uint64
	}{0, 0, 0, memSize, uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vm, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %v", err)
	}

	cpufd, err := ioctl(vm, kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VCPU: %v", err)
	}
	cpu := int(cpufd)
	step("memory slot and KVM_CREATE_VCPU")
	runSize, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %v", err)
	}
	run, err := unix.Mmap(cpu, 0, int(runSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap kvm_run: %v", err)
	}

	if err := startAt(cpu, codeAddr); err != nil {
		return err
	}
	step("registers set; first KVM_RUN")
	return runLoop(cpu, run, int(loops))
}

// startAt points the vCPU's real-mode CS:IP at addr (CS base 0).
func startAt(cpu int, addr uint64) error {
	var sregs [0x138]byte
	if _, err := ioctl(cpu, kvmGetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return fmt.Errorf("KVM_GET_SREGS: %v", err)
	}
	// cs is the first kvm_segment: base u64 at 0, selector u16 at 12.
	binary.LittleEndian.PutUint64(sregs[0:], 0)
	binary.LittleEndian.PutUint16(sregs[12:], 0)
	if _, err := ioctl(cpu, kvmSetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %v", err)
	}
	var regs [18]uint64 // rax..r15, rip, rflags
	if _, err := ioctl(cpu, kvmGetRegs, uintptr(unsafe.Pointer(&regs[0]))); err != nil {
		return fmt.Errorf("KVM_GET_REGS: %v", err)
	}
	regs[16] = addr // rip
	regs[17] = 0x2  // rflags: the reserved bit only
	if _, err := ioctl(cpu, kvmSetRegs, uintptr(unsafe.Pointer(&regs[0]))); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %v", err)
	}
	return nil
}

func runLoop(cpu int, run []byte, loops int) error {
	var greeting []byte
	timed := 0
	var start time.Time
	for n := 0; n < loops+16; n++ {
		if n == 0 && stamp {
			fmt.Printf("KVMPROBE first KVM_RUN unix-ns %d\n", time.Now().UnixNano())
		}
		if _, err := ioctl(cpu, kvmRun, 0); err != nil {
			return fmt.Errorf("KVM_RUN: %v", err)
		}
		reason := binary.LittleEndian.Uint32(run[runExitReason:])
		switch reason {
		case exitIO:
			port := binary.LittleEndian.Uint16(run[runIO+2:])
			dataOff := binary.LittleEndian.Uint64(run[runIO+8:])
			if dataOff >= uint64(len(run)) {
				return fmt.Errorf("io exit with data offset %#x outside kvm_run", dataOff)
			}
			switch port {
			case greetIO:
				greeting = append(greeting, run[dataOff])
				fmt.Printf("exit %d: IO out port %#x byte %q\n", n, port, run[dataOff])
			case loopIO:
				if timed == 0 {
					fmt.Printf("exit %d: IO out port %#x (timed loop starts)\n", n, port)
					start = time.Now()
				}
				timed++
			default:
				return fmt.Errorf("io exit on unexpected port %#x", port)
			}
		case exitHLT:
			fmt.Printf("exit %d: HLT\n", n)
			if string(greeting) != "AB" || timed != loops {
				return fmt.Errorf("guest halted after greeting %q and %d of %d loop exits", greeting, timed, loops)
			}
			elapsed := time.Since(start)
			fmt.Printf("KVMPROBE roundtrip: %d io exits in %v, %.1f us each\n",
				timed, elapsed.Round(time.Millisecond), float64(elapsed.Microseconds())/float64(timed))
			return nil
		case exitShutdown, exitFailEntr, exitInternal:
			return fmt.Errorf("exit reason %d (shutdown=8, fail_entry=9, internal_error=17)", reason)
		default:
			return fmt.Errorf("unexpected exit reason %d", reason)
		}
	}
	return fmt.Errorf("guest did not halt after %d exits", loops+16)
}
