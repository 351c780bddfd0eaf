// Command serial is stage 2 of GUIDE.md: a guest that prints through port
// I/O. Every IN and OUT of the guest leaves KVM_RUN as a KVM_EXIT_IO; the
// VMM's exit loop hands it to the device that owns the port, here
// tinyvmm's own 16550A UART (devices.Serial) at COM1, 0x3f8, and its exit
// device at 0x501, which ends the VM with the status the guest writes.
//
//	go run ./examples/serial
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"tinyvmm/devices"
	"tinyvmm/kvm"
)

const (
	memSize = 0x1000
	codeAt  = 0x0100
	tssAt   = 0xfffbd000
)

// message is what the guest prints, one OUT per byte.
const message = "Hello from the guest, through port 0x3f8\n"

// guestCode is 16-bit real-mode code, assembled from:
//
//	    mov  si, message      ; the string follows the code
//	next:
//	    lodsb                 ; al = [si++]
//	    test al, al
//	    jz   done
//	    mov  ah, al
//	wait:                     ; poll the line status register (LSR)
//	    mov  dx, 0x3fd        ; until the transmitter is empty (bit 5),
//	    in   al, dx           ; as a real 8250 driver does
//	    test al, 0x20
//	    jz   wait
//	    mov  dx, 0x3f8        ; then write the byte to THR
//	    mov  al, ah
//	    out  dx, al
//	    jmp  next
//	done:
//	    mov  dx, 0x501        ; tinyvmm's exit device:
//	    xor  al, al           ; exit status 0
//	    out  dx, al
//	    hlt                   ; not reached: the VMM stops at the OUT
func guestCode() []byte {
	prog := []byte{
		0xbe, 0x00, 0x00, // mov si, imm16 (filled below)
		0xac,       // lodsb
		0x84, 0xc0, // test al, al
		0x74, 0x12, // jz done
		0x88, 0xc4, // mov ah, al
		0xba, 0xfd, 0x03, // wait: mov dx, 0x3fd
		0xec,       // in al, dx
		0xa8, 0x20, // test al, 0x20
		0x74, 0xf8, // jz wait
		0xba, 0xf8, 0x03, // mov dx, 0x3f8
		0x88, 0xe0, // mov al, ah
		0xee,       // out dx, al
		0xeb, 0xe9, // jmp next
		0xba, 0x01, 0x05, // done: mov dx, 0x501
		0x30, 0xc0, // xor al, al
		0xee, // out dx, al
		0xf4, // hlt
	}
	msgAt := codeAt + len(prog)
	prog[1], prog[2] = byte(msgAt), byte(msgAt>>8)
	return append(append(prog, message...), 0)
}

func main() {
	status, err := run(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "serial:", err)
		os.Exit(1)
	}
	os.Exit(status)
}

// run boots the guest and serves its port I/O until it writes the exit
// port; it returns the guest's exit status.
func run(console io.Writer) (int, error) {
	if h := kvm.Detect(); !h.Usable {
		return 0, fmt.Errorf("%s", h.Why)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	sys, err := kvm.Open()
	if err != nil {
		return 0, err
	}
	defer sys.Close()
	vm, err := sys.CreateVM()
	if err != nil {
		return 0, err
	}
	defer vm.Close()
	if err := vm.SetTSSAddr(tssAt); err != nil {
		return 0, err
	}
	mem, err := unix.Mmap(-1, 0, memSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(mem)
	copy(mem[codeAt:], guestCode())
	if err := vm.SetUserMemoryRegion(0, 0, mem, 0); err != nil {
		return 0, err
	}
	cpu, err := vm.CreateVCPU(0)
	if err != nil {
		return 0, err
	}
	defer cpu.Close()
	sregs, err := cpu.Sregs()
	if err != nil {
		return 0, err
	}
	sregs.CS.Base, sregs.CS.Selector = 0, 0
	sregs.DS.Base, sregs.DS.Selector = 0, 0 // lodsb reads DS:SI
	if err := cpu.SetSregs(sregs); err != nil {
		return 0, err
	}
	if err := cpu.SetRegs(kvm.Regs{RIP: codeAt, RFLAGS: 2}); err != nil {
		return 0, err
	}

	// The port-I/O bus: the UART at COM1 (no interrupt line: this guest
	// polls) and the exit device. The VMM in vmm/ wires the same devices.
	pio := devices.NewPIOBus()
	if err := pio.Register(devices.COM1Port, devices.SerialPorts, devices.NewSerial(nil, console)); err != nil {
		return 0, err
	}
	exited := make(chan int, 1) // the first status the guest wrote
	exit := devices.NewExitDevice(func(status int) {
		select {
		case exited <- status:
		default:
		}
	})
	if err := pio.Register(devices.ExitPort, 1, exit); err != nil {
		return 0, err
	}

	// The exit loop (vmm/vcpu_loop.go: handleExit is the full one).
	var ins, outs int // exits by direction
	for {
		reason, err := cpu.Run()
		if err != nil {
			return 0, err
		}
		if reason != kvm.ExitIO {
			regs, _ := cpu.Regs()
			return 0, fmt.Errorf("unexpected %v at RIP %#x", reason, regs.RIP)
		}
		io := cpu.IO()
		// A string instruction (rep outsb) is Count accesses of Size bytes.
		for i := 0; i+io.Size <= len(io.Data); i += io.Size {
			if io.Out {
				pio.Write(uint64(io.Port), io.Data[i:i+io.Size])
			} else {
				pio.Read(uint64(io.Port), io.Data[i:i+io.Size]) // KVM hands it to the guest at the next KVM_RUN
			}
		}
		if io.Out {
			outs++
		} else {
			ins++
		}
		select {
		case status := <-exited:
			fmt.Fprintf(console, "guest wrote %d to the exit port %#x after %d KVM_EXIT_IO exits (%d IN from the LSR, %d OUT)\n",
				status, devices.ExitPort, ins+outs, ins, outs)
			return status, nil
		default:
		}
	}
}
