package boot

import (
	"encoding/binary"
	"fmt"
)

// The user-mode start: under PVM, guest code runs natively only
// in a vCPU that starts at CPL3 and never enters CPL0. LoadUser sets up
// everything such a guest needs so that it never has to: all RAM and the
// 3-4 GiB MMIO window identity-mapped as user pages, port I/O allowed
// (IOPL 3 and a TSS I/O bitmap that allows every port), IF 0. The IDT and
// kernel segments exist only so that an exception, if one happens anyway,
// is reported instead of triple-faulting.

// UserExitPort is where the exception stubs write: tinyvmm's exit device
// (devices.ExitPort; boot does not import devices).
const UserExitPort = 0x501

const (
	idtVectors      = 256
	idtGateLen      = 16
	gateInterrupt64 = 0x8e // present, DPL 0, 64-bit interrupt gate
	tssRSP0         = 4
	tssIOMapBase    = 0x66
	tssLen          = 0x68
	// The I/O bitmap: one bit per port, all clear (allowed), then the
	// 0xff byte the CPU may read past the last port.
	ioBitmapLen  = 65536 / 8
	userTSSLimit = tssLen + ioBitmapLen // the terminating byte is the last one
	userArgsMax  = cmdlineMax - 1
)

// LoadUser loads a static x86-64 ELF at its fixed addresses (p_vaddr must
// equal p_paddr, at or above 1 MiB) and returns a vCPU state that enters
// it at CPL3 in long mode: RDI = the NUL-terminated args string, RSP = a
// 16-byte aligned stack below 0x80000, RFLAGS = IOPL 3 with IF 0, every
// port allowed by the TSS I/O bitmap too, and SSE usable (CR4.OSFXSR).
// PVM runs the guest with IOPL 0 whatever RFLAGS says, so there the bitmap
// is what lets in/out reach the VMM instead of raising #GP. Should the
// guest fault anyway, vector N's stub writes N to UserExitPort; see
// UserExceptionVector.
func LoadUser(l Layout, elf File, args string) (CPUState, error) {
	if err := l.check(); err != nil {
		return CPUState{}, err
	}
	head, err := readHead(elf, 4, "user-mode guest")
	if err != nil {
		return CPUState{}, err
	}
	if string(head) != elfMagic {
		return CPUState{}, fmt.Errorf("boot: user-mode guest is not an ELF file")
	}
	k, err := parseELF(elf)
	if err != nil {
		return CPUState{}, err
	}
	for i, s := range k.Segments {
		if s.Vaddr != s.Paddr {
			return CPUState{}, fmt.Errorf("boot: user-mode guest segment %d is linked at %#x but loads at %#x; link it at its load address", i, s.Vaddr, s.Paddr)
		}
		if err := loadSegment(l, elf, s, fmt.Sprintf("user-mode guest segment %d", i)); err != nil {
			return CPUState{}, err
		}
	}
	entry, ok := k.physEntry()
	if !ok {
		return CPUState{}, fmt.Errorf("boot: user-mode guest's entry %#x is outside its loaded segments", k.Entry)
	}
	argsAddr, err := writeCmdline(l, args, userArgsMax+1)
	if err != nil {
		return CPUState{}, err
	}
	cr3, err := writeIdentityMap(l.Low, mappedGiB(l.MemSize), true)
	if err != nil {
		return CPUState{}, err
	}
	writeTSS(l.Low)
	writeExceptionStubs(l.Low)
	idtLimit := writeIDT(l.Low)
	tss := tssSegment(tssAddr, userTSSLimit)
	gdtLimit := writeGDT(l.Low, tss)
	return CPUState{
		RIP: entry, RSP: userStackTop, RDI: argsAddr, RFLAGS: rflagsFixed | rflagsIOPL3,
		CR0:  cr0PE | cr0MP | cr0ET | cr0NE | cr0WP | cr0PG,
		CR3:  cr3,
		CR4:  cr4PAE | cr4OSFXSR | cr4OSXMMEXCPT,
		EFER: eferLME | eferLMA,
		CS:   segUserCode, DS: segUserData, ES: segUserData, FS: segUserData, GS: segUserData, SS: segUserData,
		TR: tss, LDT: segLDT,
		GDTBase: gdtAddr, GDTLimit: gdtLimit,
		IDTBase: idtAddr, IDTLimit: idtLimit,
	}, nil
}

// UserExceptionVector says whether a vCPU that LoadUser started stopped in
// an exception stub (rip at or inside the stub), and for which vector. The
// hardware frame (RIP, CS, RFLAGS, RSP, SS, and an error code for some
// vectors) is on the ring-0 stack just below UserExceptionStack.
func UserExceptionVector(rip uint64) (int, bool) {
	if rip < stubsAddr || rip >= stubsAddr+idtVectors*stubLen {
		return 0, false
	}
	return int((rip - stubsAddr) / stubLen), true
}

// UserExceptionStack is the top of the ring-0 stack an exception lands on.
const UserExceptionStack = ring0StackTop

// mappedGiB is how many GiB the user map covers: the low 4 GiB (RAM and
// the MMIO window) and RAM above 4 GiB.
func mappedGiB(memSize uint64) uint64 {
	if memSize <= lowMemLimit {
		return 4
	}
	return (highRAMBase + memSize - lowMemLimit + gib - 1) / gib
}

// writeTSS writes a 64-bit TSS whose RSP0 is the exception stack and whose
// I/O bitmap, right after it, allows every port.
func writeTSS(mem []byte) {
	t := mem[tssAddr : tssAddr+userTSSLimit+1]
	clear(t)
	binary.LittleEndian.PutUint64(t[tssRSP0:], ring0StackTop)
	binary.LittleEndian.PutUint16(t[tssIOMapBase:], tssLen)
	t[userTSSLimit] = 0xff
}

// writeExceptionStubs writes, for every vector v, 16 bytes of:
//
//	mov $v, %al; mov $UserExitPort, %dx; out %al, %dx; 1: hlt; jmp 1b
func writeExceptionStubs(mem []byte) {
	for v := 0; v < idtVectors; v++ {
		s := mem[stubsAddr+v*stubLen : stubsAddr+(v+1)*stubLen]
		copy(s, []byte{
			0xb0, byte(v), // mov $v, %al
			0x66, 0xba, UserExitPort & 0xff, UserExitPort >> 8, // mov $port, %dx
			0xee,       // out %al, %dx
			0xf4,       // hlt
			0xeb, 0xfd, // jmp back to hlt
			0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, // padding, never reached
		})
	}
}

// writeIDT points every vector at its stub through a ring-0 interrupt gate
// and returns the IDT limit.
func writeIDT(mem []byte) uint16 {
	le := binary.LittleEndian
	for v := 0; v < idtVectors; v++ {
		g := mem[idtAddr+v*idtGateLen:]
		handler := uint64(stubsAddr + v*stubLen)
		le.PutUint16(g[0:], uint16(handler))
		le.PutUint16(g[2:], selCode64)
		g[4] = 0 // no IST
		g[5] = gateInterrupt64
		le.PutUint16(g[6:], uint16(handler>>16))
		le.PutUint32(g[8:], uint32(handler>>32))
		le.PutUint32(g[12:], 0)
	}
	return idtVectors*idtGateLen - 1
}
