// Package boot implements the Linux x86 boot protocols tinyvmm uses: the
// 64-bit bzImage protocol (setup header, boot_params, e820), direct loading
// of an uncompressed vmlinux ELF (through its PVH entry when it has one), and
// the GDT, identity page tables and MP table those entries need. Guest RAM
// is a plain byte slice; the kernel and initrd are read at offsets straight
// into it (only headers are buffered). It knows nothing of KVM.
package boot

import "bytes"

// Layout is guest RAM as the VMM laid it out.
type Layout struct {
	Low     []byte // guest RAM from GPA 0 up to min(MemSize, 3 GiB): boot writes only here
	MemSize uint64 // total RAM; RAM above 3 GiB starts at 4 GiB (the 32-bit PCI hole is 3-4 GiB)
	CPUs    int
	// Zeroed says Low is all zero, as fresh anonymous memory is: Load then
	// leaves alone what it would only zero (an ELF segment's bss, the rest
	// of the command line's buffer), so those pages stay untouched until
	// the guest uses them.
	Zeroed bool
}

// Image is what to boot.
type Image struct {
	Kernel  File // a bzImage or an uncompressed vmlinux ELF (detected by content)
	Initrd  File // may be nil
	Cmdline string
}

// Segment is one segment register's state, in the form KVM's kvm_segment wants.
type Segment struct {
	Base                           uint64
	Limit                          uint32
	Selector                       uint16
	Type                           uint8
	Present, DPL, DB, S, L, G, AVL uint8
}

// CPUState is the boot vCPU's initial state.
type CPUState struct {
	RIP, RSP, RSI, RDI, RBX, RFLAGS uint64 // RDI: LoadUser's args pointer
	CR0, CR3, CR4, EFER             uint64
	CS, DS, ES, FS, GS, SS, TR, LDT Segment
	GDTBase                         uint64
	GDTLimit                        uint16
	IDTBase                         uint64
	IDTLimit                        uint16
}

// Load places the kernel, initrd, command line, boot_params / PVH start_info, e820 map,
// GDT, identity page tables and an MP table in l.Low, and returns the BSP's initial state.
func Load(l Layout, img Image) (CPUState, error) {
	if err := l.check(); err != nil {
		return CPUState{}, err
	}
	head, err := readHead(img.Kernel, hdrMaxEnd, "kernel")
	if err != nil {
		return CPUState{}, err
	}
	switch {
	case bytes.HasPrefix(head, []byte(elfMagic)):
		return loadELF(l, img)
	case isBzImage(head):
		return loadBzImage(l, img, head)
	}
	return CPUState{}, notAKernel(head, fileSize(img.Kernel))
}
