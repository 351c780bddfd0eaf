package boot

import (
	"bytes"
	"testing"
)

// A vmlinux-like layout: text linked at 0xffffffff81000000, loaded at
// 16 MiB, and a data segment with bss.
var (
	elfText = elfSeg{vaddr: 0xffffffff81000000, paddr: 16 * mib, data: pattern(8192, 0x11)}
	elfData = elfSeg{vaddr: 0xffffffff81200000, paddr: 18 * mib, data: pattern(100, 0x22), memsz: 3 * pageSize}
)

func TestELFPVH(t *testing.T) {
	l := newLayout(t, 128*mib, 4)
	for i := range l.Low[18*mib : 18*mib+3*pageSize] {
		l.Low[18*mib+i] = 0xee // bss must come out zeroed
	}
	initrd := pattern(10000, 7)
	k := buildELF(16*mib, 16*mib+0x40, elfText, elfData)
	st, err := Load(l, Image{Kernel: Bytes(k), Initrd: Bytes(initrd), Cmdline: "quiet"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l.Low[16*mib:16*mib+8192], elfText.data) || !bytes.Equal(l.Low[18*mib:18*mib+100], elfData.data) {
		t.Fatal("segments not at p_paddr")
	}
	if bytes.ContainsAny(l.Low[18*mib+100:18*mib+3*pageSize], "\xee") {
		t.Error("bss not zeroed")
	}
	// PVH entry state: 32-bit protected mode, paging off, EBX = start_info.
	if st.RIP != 16*mib+0x40 || st.RBX != startInfoAddr {
		t.Fatalf("RIP %#x RBX %#x", st.RIP, st.RBX)
	}
	if st.CR0&cr0PE == 0 || st.CR0&cr0PG != 0 || st.CR4 != 0 || st.EFER != 0 || st.RFLAGS&(1<<9|1<<8|1<<17) != 0 {
		t.Errorf("CR0 %#x CR4 %#x EFER %#x RFLAGS %#x", st.CR0, st.CR4, st.EFER, st.RFLAGS)
	}
	if st.CS.DB != 1 || st.CS.L != 0 || st.CS.Type != 0xb || st.CS.Limit != 0xffffffff || st.CS.Base != 0 {
		t.Errorf("CS %+v", st.CS)
	}
	for _, s := range []Segment{st.DS, st.ES, st.SS} {
		if s.DB != 1 || s.Type != 3 || s.Limit != 0xffffffff || s.Base != 0 {
			t.Errorf("data segment %+v", s)
		}
	}
	if st.TR.Base != 0 || st.TR.Limit != 0x67 || st.TR.Type != 0xb || st.TR.Present != 1 {
		t.Errorf("TR %+v (PVH wants a 32-bit TSS at 0 of 0x68 bytes)", st.TR)
	}
	checkGDTMatches(t, l.Low, st)

	si := l.Low[startInfoAddr:]
	if le.Uint32(si[0:]) != 0x336ec578 || le.Uint32(si[4:]) != 1 || le.Uint32(si[8:]) != 0 {
		t.Errorf("magic %#x version %d flags %#x", le.Uint32(si), le.Uint32(si[4:]), le.Uint32(si[8:]))
	}
	cmd := le.Uint64(si[24:])
	if string(l.Low[cmd:cmd+6]) != "quiet\x00" {
		t.Errorf("cmdline_paddr %#x -> %q", cmd, l.Low[cmd:cmd+6])
	}
	if le.Uint64(si[32:]) != 0 {
		t.Error("rsdp_paddr should be 0")
	}
	if n := le.Uint32(si[12:]); n != 1 {
		t.Fatalf("nr_modules %d", n)
	}
	mod := l.Low[le.Uint64(si[16:]):]
	addr, sz := le.Uint64(mod), le.Uint64(mod[8:])
	if sz != uint64(len(initrd)) || addr%pageSize != 0 || addr+sz > 128*mib || addr < 18*mib+3*pageSize || !bytes.Equal(l.Low[addr:addr+sz], initrd) {
		t.Errorf("module at %#x size %d", addr, sz)
	}
	if le.Uint64(mod[16:]) != 0 || le.Uint64(mod[24:]) != 0 {
		t.Error("module cmdline/reserved not zero")
	}
	want := e820Map(l)
	mm, n := l.Low[le.Uint64(si[40:]):], int(le.Uint32(si[48:]))
	if n != len(want) || le.Uint32(si[52:]) != 0 {
		t.Fatalf("memmap_entries %d, want %d", n, len(want))
	}
	for i, w := range want {
		e := mm[24*i:]
		got := e820Entry{le.Uint64(e), le.Uint64(e[8:]), le.Uint32(e[16:])}
		if got != w || le.Uint32(e[20:]) != 0 {
			t.Errorf("memmap[%d] = %+v, want %+v", i, got, w)
		}
	}
	checkMPTable(t, l.Low, 4)
}

func TestELF64BitEntry(t *testing.T) {
	for _, c := range []struct {
		name  string
		entry uint64
	}{
		{"physical e_entry as vmlinux has", 16*mib + 0x100},
		{"virtual e_entry", 0xffffffff81000100},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLayout(t, 64*mib, 1)
			st, err := Load(l, Image{Kernel: Bytes(buildELF(c.entry, 0, elfText, elfData)), Initrd: Bytes(pattern(999, 1)), Cmdline: "a=b"})
			if err != nil {
				t.Fatal(err)
			}
			if st.RIP != 16*mib+0x100 || st.RSI != zeroPageAddr || st.RBX != 0 {
				t.Fatalf("RIP %#x RSI %#x", st.RIP, st.RSI)
			}
			checkLongMode(t, l.Low, st)
			zp := l.Low[zeroPageAddr:]
			if le.Uint16(zp[hdrBootFlag:]) != 0xaa55 || le.Uint32(zp[hdrMagic:]) != hdrMagicValue || zp[hdrTypeOfLoader] != 0xff {
				t.Error("synthetic setup header missing boot_flag, HdrS or type_of_loader")
			}
			if p := le.Uint32(zp[hdrCmdLinePtr:]); string(l.Low[p:p+4]) != "a=b\x00" {
				t.Errorf("cmd_line_ptr %#x", p)
			}
			ri, rs := le.Uint32(zp[hdrRamdiskImage:]), le.Uint32(zp[hdrRamdiskSize:])
			if rs != 999 || ri != 64*mib-pageSize {
				t.Errorf("ramdisk %#x size %d", ri, rs)
			}
			checkE820(t, zp, e820Map(l))
		})
	}
}

func TestPVHNoteWithFourByteDesc(t *testing.T) {
	notes := []byte{4, 0, 0, 0, 4, 0, 0, 0, 18, 0, 0, 0, 'X', 'e', 'n', 0, 0x40, 0, 0, 1}
	entry, ok := findPVHNote(notes)
	if !ok || entry != 0x1000040 {
		t.Fatalf("entry %#x ok %v", entry, ok)
	}
	if _, ok := findPVHNote(notes[:18]); ok {
		t.Error("a truncated note was accepted")
	}
}
