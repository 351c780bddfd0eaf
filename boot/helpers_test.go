package boot

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

var le = binary.LittleEndian

// newLayout maps guest RAM as the VMM does: anonymous memory that only
// takes host pages where it is written (make would zero all of it).
func newLayout(t testing.TB, memSize uint64, cpus int) Layout {
	t.Helper()
	low, err := unix.Mmap(-1, 0, int(min(memSize, lowMemLimit)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatalf("mapping %s of guest RAM: %v", size(memSize), err)
	}
	t.Cleanup(func() { unix.Munmap(low) })
	return Layout{Low: low, MemSize: memSize, CPUs: cpus}
}

// bigZero is n zero bytes that take no host memory until read.
func bigZero(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// bzSpec describes a synthetic bzImage.
type bzSpec struct {
	version       uint16
	setupSects    uint8
	loadflags     uint8
	xloadflags    uint16
	relocatable   bool
	prefAddress   uint64
	alignment     uint32
	initSize      uint32
	initrdAddrMax uint32
	cmdlineSize   uint32
	pmSize        int
}

func defaultBz() bzSpec {
	return bzSpec{version: 0x20f, setupSects: 27, loadflags: loadedHigh, xloadflags: xlfKernel64,
		relocatable: true, prefAddress: 16 * mib, alignment: 2 * mib, initSize: 4 * mib,
		initrdAddrMax: 0x7fffffff, cmdlineSize: 2047, pmSize: 64 * 1024}
}

// build lays out a bzImage: boot sector and setup, then the protected-mode
// kernel filled with a recognizable pattern.
func (s bzSpec) build() []byte {
	setup := (int(s.setupSects) + 1) * 512
	if s.setupSects == 0 {
		setup = 5 * 512
	}
	b := make([]byte, setup+s.pmSize)
	b[hdrSetupSects] = s.setupSects
	le.PutUint32(b[hdrSyssize:], uint32(s.pmSize/16))
	le.PutUint16(b[hdrBootFlag:], bootFlagValue)
	b[hdrJump], b[hdrJump+1] = 0xeb, 0x6a // header ends at 0x26c, as in Linux 6.1
	le.PutUint32(b[hdrMagic:], hdrMagicValue)
	le.PutUint16(b[hdrVersion:], s.version)
	b[hdrLoadflags] = s.loadflags
	le.PutUint32(b[hdrCode32Start:], 0x100000)
	le.PutUint32(b[hdrInitrdAddrMax:], s.initrdAddrMax)
	le.PutUint32(b[hdrKernelAlign:], s.alignment)
	if s.relocatable {
		b[hdrRelocatable] = 1
	}
	le.PutUint16(b[hdrXloadflags:], s.xloadflags)
	le.PutUint32(b[hdrCmdlineSize:], s.cmdlineSize)
	le.PutUint64(b[hdrPrefAddress:], s.prefAddress)
	le.PutUint32(b[hdrInitSize:], s.initSize)
	le.PutUint32(b[0x264:], 0xdeadbeef) // handover_offset: must be copied through
	for i := setup; i < len(b); i++ {
		b[i] = byte(i*7 + 1)
	}
	return b
}

type elfSeg struct {
	vaddr, paddr uint64
	data         []byte
	memsz        uint64
}

// buildELF writes an ELF64 x86-64 executable with the given PT_LOAD
// segments and, when pvh is non-zero, a PT_NOTE with a Xen PVH entry note
// (an 8-byte desc, as Linux writes it) after an unrelated note.
func buildELF(entry uint64, pvh uint64, segs ...elfSeg) []byte {
	nph := len(segs) + 1
	off := elfHeaderLen + nph*elfPhdrLen
	b := make([]byte, off)
	copy(b, elfMagic)
	b[4], b[5], b[6] = elfClass64, elfDataLSB, 1
	le.PutUint16(b[16:], 2) // ET_EXEC
	le.PutUint16(b[18:], emX86_64)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], entry)
	le.PutUint64(b[32:], elfHeaderLen)
	le.PutUint16(b[52:], elfHeaderLen)
	le.PutUint16(b[54:], elfPhdrLen)
	le.PutUint16(b[56:], uint16(nph))
	for i, s := range segs {
		ph := b[elfHeaderLen+i*elfPhdrLen:]
		le.PutUint32(ph[0:], ptLoad)
		le.PutUint64(ph[8:], uint64(len(b)))
		le.PutUint64(ph[16:], s.vaddr)
		le.PutUint64(ph[24:], s.paddr)
		le.PutUint64(ph[32:], uint64(len(s.data)))
		le.PutUint64(ph[40:], max(s.memsz, uint64(len(s.data))))
		b = append(b, s.data...)
	}
	var notes []byte
	note := func(name string, typ uint32, desc []byte) {
		h := make([]byte, 12)
		le.PutUint32(h[0:], uint32(len(name)))
		le.PutUint32(h[4:], uint32(len(desc)))
		le.PutUint32(h[8:], typ)
		notes = append(notes, h...)
		notes = append(notes, name...)
		for len(notes)%4 != 0 {
			notes = append(notes, 0)
		}
		notes = append(notes, desc...)
		for len(notes)%4 != 0 {
			notes = append(notes, 0)
		}
	}
	note("GNU\x00", 3, []byte{1, 2, 3, 4, 5})
	if pvh != 0 {
		d := make([]byte, 8)
		le.PutUint64(d, pvh)
		note(xenNoteName, 17, []byte{9, 9, 9, 9}) // another Xen note first
		note(xenNoteName, xenPhys32Entry, d)
	}
	ph := b[elfHeaderLen+len(segs)*elfPhdrLen:]
	le.PutUint32(ph[0:], ptNote)
	le.PutUint64(ph[8:], uint64(len(b)))
	le.PutUint64(ph[32:], uint64(len(notes)))
	le.PutUint64(ph[40:], uint64(len(notes)))
	return append(b, notes...)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ seed
	}
	return b
}

// translate walks 4-level page tables like the MMU: it returns the physical
// address, whether every level allows user access, and whether it is mapped.
func translate(mem []byte, cr3, va uint64) (pa uint64, user, ok bool) {
	table := cr3 &^ 0xfff
	user = true
	for level := 3; level >= 0; level-- {
		idx := va >> (12 + 9*uint(level)) & 0x1ff
		e := le.Uint64(mem[table+8*idx:])
		if e&ptePresent == 0 {
			return 0, false, false
		}
		user = user && e&pteUser != 0
		if level == 0 || (level <= 2 && e&pteHuge != 0) {
			pageBits := 12 + 9*uint(level)
			base := e & 0x000ffffffffff000 &^ (1<<pageBits - 1)
			return base | va&(1<<pageBits-1), user, true
		}
		table = e & 0x000ffffffffff000
	}
	return 0, false, false
}

// decodeDescriptor turns a GDT entry back into a Segment (selector aside).
func decodeDescriptor(d uint64) Segment {
	s := Segment{
		Base:    d>>16&0xffffff | (d>>56&0xff)<<24,
		Limit:   uint32(d&0xffff | (d>>48&0xf)<<16),
		Type:    uint8(d >> 40 & 0xf),
		S:       uint8(d >> 44 & 1),
		DPL:     uint8(d >> 45 & 3),
		Present: uint8(d >> 47 & 1),
		AVL:     uint8(d >> 52 & 1),
		L:       uint8(d >> 53 & 1),
		DB:      uint8(d >> 54 & 1),
		G:       uint8(d >> 55 & 1),
	}
	if s.G == 1 {
		s.Limit = s.Limit<<12 | 0xfff
	}
	return s
}

// checkGDTMatches checks that the GDT in memory describes every loaded
// segment register exactly as the CPU state does.
func checkGDTMatches(t *testing.T, mem []byte, st CPUState) {
	t.Helper()
	if st.GDTBase != gdtAddr || st.GDTLimit != gdtEntries*8-1 {
		t.Fatalf("GDT at %#x limit %#x", st.GDTBase, st.GDTLimit)
	}
	for name, s := range map[string]Segment{"CS": st.CS, "DS": st.DS, "ES": st.ES, "SS": st.SS, "FS": st.FS, "GS": st.GS, "TR": st.TR} {
		idx := uint64(s.Selector &^ 7)
		if idx == 0 || idx+8 > uint64(st.GDTLimit)+1 {
			t.Errorf("%s selector %#x outside the GDT", name, s.Selector)
			continue
		}
		got := decodeDescriptor(le.Uint64(mem[st.GDTBase+idx:]))
		if name == "TR" {
			got.Base |= le.Uint64(mem[st.GDTBase+idx+8:]) << 32
		}
		want := s
		want.Selector = 0
		if got != want {
			t.Errorf("%s: GDT entry %#x decodes to %+v, CPU state has %+v", name, idx, got, want)
		}
		if uint8(s.Selector&3) != s.DPL && name != "TR" {
			t.Errorf("%s: selector RPL %d != DPL %d", name, s.Selector&3, s.DPL)
		}
	}
}
