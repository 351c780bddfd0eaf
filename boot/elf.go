package boot

import (
	"encoding/binary"
	"fmt"
)

// A minimal reader for the ELF64 kernels tinyvmm loads: program headers and
// notes only, every offset checked, since the file is user input.

const (
	elfMagic       = "\x7fELF"
	elfClass64     = 2
	elfDataLSB     = 1
	emX86_64       = 62
	ptLoad         = 1
	ptNote         = 4
	elfHeaderLen   = 64
	elfPhdrLen     = 56
	elfMaxPhdrs    = 256
	elfNotesMax    = 64 << 10 // notes past this in one PT_NOTE are not searched (vmlinux has ~200 bytes)
	xenNoteName    = "Xen\x00"
	xenPhys32Entry = 18 // XEN_ELFNOTE_PHYS32_ENTRY: the PVH entry point
)

type elfSegment struct {
	Offset, Vaddr, Paddr, Filesz, Memsz uint64
}

type elfKernel struct {
	Entry    uint64 // e_entry, as written (virtual or physical)
	Segments []elfSegment
	PVHEntry uint64 // physical 32-bit entry from the Xen PVH note
	HasPVH   bool
}

// parseELF reads the ELF header, the program headers and the notes; the
// segments stay in the file until Load reads each into guest RAM.
func parseELF(f File) (*elfKernel, error) {
	size := fileSize(f)
	if size < elfHeaderLen {
		return nil, fmt.Errorf("boot: ELF kernel is truncated (%d bytes, shorter than its header)", size)
	}
	b := make([]byte, elfHeaderLen)
	if err := readAt(f, b, 0, "ELF kernel"); err != nil {
		return nil, err
	}
	if b[4] != elfClass64 || b[5] != elfDataLSB {
		return nil, fmt.Errorf("boot: ELF kernel is not 64-bit little-endian; tinyvmm boots x86-64 kernels")
	}
	le := binary.LittleEndian
	if m := le.Uint16(b[18:]); m != emX86_64 {
		return nil, fmt.Errorf("boot: ELF kernel is for machine %d, not x86-64 (62)", m)
	}
	k := &elfKernel{Entry: le.Uint64(b[24:])}
	phoff, phentsize, phnum := le.Uint64(b[32:]), uint64(le.Uint16(b[54:])), uint64(le.Uint16(b[56:]))
	if phnum == 0 || phnum > elfMaxPhdrs || phentsize < elfPhdrLen {
		return nil, fmt.Errorf("boot: ELF kernel has a bad program header table (%d entries of %d bytes)", phnum, phentsize)
	}
	if phoff > size || phnum*phentsize > size-phoff {
		return nil, fmt.Errorf("boot: ELF kernel is truncated: its program headers end past the file (%d bytes)", size)
	}
	ph := make([]byte, elfPhdrLen) // only the fields we read, whatever phentsize says
	for i := uint64(0); i < phnum; i++ {
		if err := readAt(f, ph, phoff+i*phentsize, "ELF kernel"); err != nil {
			return nil, err
		}
		typ := le.Uint32(ph[0:])
		s := elfSegment{Offset: le.Uint64(ph[8:]), Vaddr: le.Uint64(ph[16:]), Paddr: le.Uint64(ph[24:]),
			Filesz: le.Uint64(ph[32:]), Memsz: le.Uint64(ph[40:])}
		if typ != ptLoad && typ != ptNote {
			continue
		}
		if s.Offset > size || s.Filesz > size-s.Offset {
			return nil, fmt.Errorf("boot: ELF kernel is truncated: segment %d ends past the file (%d bytes)", i, size)
		}
		if typ == ptNote {
			notes := make([]byte, min(s.Filesz, elfNotesMax))
			if err := readAt(f, notes, s.Offset, "ELF kernel"); err != nil {
				return nil, err
			}
			if entry, ok := findPVHNote(notes); ok {
				k.PVHEntry, k.HasPVH = entry, true
			}
			continue
		}
		if s.Memsz < s.Filesz {
			return nil, fmt.Errorf("boot: ELF segment %d has memsz %#x smaller than filesz %#x", i, s.Memsz, s.Filesz)
		}
		if s.Memsz == 0 {
			continue
		}
		k.Segments = append(k.Segments, s)
	}
	if len(k.Segments) == 0 {
		return nil, fmt.Errorf("boot: ELF kernel has no loadable segments")
	}
	// Disjoint segments make the load order irrelevant, and let a zeroed
	// Layout skip zeroing each bss.
	for i, a := range k.Segments {
		for j, b := range k.Segments[:i] {
			if a.Paddr < segEnd(b) && b.Paddr < segEnd(a) {
				return nil, fmt.Errorf("boot: ELF kernel's loadable segments %d and %d overlap at %#x", j, i, max(a.Paddr, b.Paddr))
			}
		}
	}
	return k, nil
}

// segEnd is where s ends in guest physical memory, saturated instead of
// wrapping (checkRange refuses such a segment later).
func segEnd(s elfSegment) uint64 {
	if e := s.Paddr + s.Memsz; e >= s.Paddr {
		return e
	}
	return ^uint64(0)
}

// findPVHNote scans one PT_NOTE segment for XEN_ELFNOTE_PHYS32_ENTRY.
func findPVHNote(notes []byte) (uint64, bool) {
	le := binary.LittleEndian
	for len(notes) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(notes)), uint64(le.Uint32(notes[4:])), le.Uint32(notes[8:])
		nameEnd := 12 + align(namesz, 4)
		descEnd := nameEnd + align(descsz, 4)
		if namesz > uint64(len(notes)) || descsz > uint64(len(notes)) || descEnd > uint64(len(notes)) {
			return 0, false
		}
		name, desc := notes[12:12+namesz], notes[nameEnd:nameEnd+descsz]
		if typ == xenPhys32Entry && string(name) == xenNoteName {
			switch descsz {
			case 4:
				return uint64(le.Uint32(desc)), true
			case 8:
				return le.Uint64(desc), true
			}
		}
		notes = notes[descEnd:]
	}
	return 0, false
}

// physEntry converts e_entry to a physical address: vmlinux's e_entry is
// already physical (phys_startup_64), other kernels give a virtual one.
func (k *elfKernel) physEntry() (uint64, bool) {
	for _, s := range k.Segments {
		if k.Entry >= s.Paddr && k.Entry-s.Paddr < s.Memsz {
			return k.Entry, true
		}
	}
	for _, s := range k.Segments {
		if k.Entry >= s.Vaddr && k.Entry-s.Vaddr < s.Memsz {
			return k.Entry - s.Vaddr + s.Paddr, true
		}
	}
	return 0, false
}

func align(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }
