package vmm

import "encoding/binary"

// tinyELF builds a minimal x86-64 ELF kernel: one PT_LOAD of code at
// 1 MiB, entered there, and with pvh a Xen PVH note naming the same entry
// (32-bit protected mode); without it boot enters in long mode.
func tinyELF(code []byte, pvh bool) []byte {
	const (
		loadAddr = 0x100000
		codeOff  = 0x200
		noteOff  = 64 + 2*56
	)
	le := binary.LittleEndian
	b := make([]byte, codeOff+len(code))
	copy(b, "\x7fELF\x02\x01\x01")
	le.PutUint16(b[16:], 2)  // ET_EXEC
	le.PutUint16(b[18:], 62) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], loadAddr) // e_entry
	le.PutUint64(b[32:], 64)       // e_phoff
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	phnum := uint16(1)
	if pvh {
		phnum = 2
	}
	le.PutUint16(b[56:], phnum)

	load := b[64:]
	le.PutUint32(load[0:], 1) // PT_LOAD
	le.PutUint32(load[4:], 5) // R+X
	le.PutUint64(load[8:], codeOff)
	le.PutUint64(load[16:], loadAddr)
	le.PutUint64(load[24:], loadAddr)
	le.PutUint64(load[32:], uint64(len(code)))
	le.PutUint64(load[40:], uint64(len(code)))
	le.PutUint64(load[48:], 0x1000)
	if pvh {
		note := b[64+56:]
		le.PutUint32(note[0:], 4) // PT_NOTE
		le.PutUint64(note[8:], noteOff)
		le.PutUint64(note[32:], 20)
		le.PutUint64(note[40:], 20)
		n := b[noteOff:]
		le.PutUint32(n[0:], 4)  // namesz
		le.PutUint32(n[4:], 4)  // descsz
		le.PutUint32(n[8:], 18) // XEN_ELFNOTE_PHYS32_ENTRY
		copy(n[12:], "Xen\x00")
		le.PutUint32(n[16:], loadAddr)
	}
	copy(b[codeOff:], code)
	return b
}

// Guest programs; each encoding means the same in 32-bit and 64-bit mode.
var (
	// helloExit7 prints "hi\n" on COM1 and writes 7 to the exit device.
	helloExit7 = []byte{
		0x66, 0xba, 0xf8, 0x03, // mov dx, 0x3f8
		0xb0, 'h', 0xee, // mov al, 'h'; out dx, al
		0xb0, 'i', 0xee,
		0xb0, '\n', 0xee,
		0x66, 0xba, 0x01, 0x05, // mov dx, 0x501
		0xb0, 0x07, 0xee, // mov al, 7; out dx, al
		0xf4, 0xeb, 0xfd, // 1: hlt; jmp 1b
	}
	// tripleFault runs ud2 with no IDT: #UD, #GP, #DF, shutdown.
	tripleFault = []byte{0x0f, 0x0b}
	// spin loops forever.
	spin = []byte{0xeb, 0xfe}
	// i8042Reboot asks the keyboard controller for a reset.
	i8042Reboot = []byte{
		0xb0, 0xfe, // mov al, 0xfe
		0xe6, 0x64, // out 0x64, al
		0xeb, 0xfe,
	}
)
