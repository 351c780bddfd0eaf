package boot

import (
	"bytes"
	"strings"
	"testing"
)

// A bench-guest-like ELF: text and data at 4 MiB, as guest/bench/link.ld.
var (
	userText = elfSeg{vaddr: 0x400000, paddr: 0x400000, data: pattern(5000, 0x31)}
	userData = elfSeg{vaddr: 0x402000, paddr: 0x402000, data: pattern(64, 0x32), memsz: 0x11000}
)

func TestLoadUser(t *testing.T) {
	l := newLayout(t, 256*mib, 1)
	const args = "mode=tx size=64 kick=32"
	st, err := LoadUser(l, Bytes(buildELF(0x400010, 0x400000, userText, userData)), args)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l.Low[0x400000:0x400000+5000], userText.data) || !bytes.Equal(l.Low[0x402000:0x402040], userData.data) {
		t.Fatal("segments not loaded")
	}
	if st.RIP != 0x400010 {
		t.Errorf("RIP %#x: the user start ignores the PVH note and enters at e_entry", st.RIP)
	}
	if got := string(l.Low[st.RDI : st.RDI+uint64(len(args))+1]); got != args+"\x00" {
		t.Errorf("RDI %#x -> %q", st.RDI, got)
	}
	if st.RSP%16 != 0 || st.RSP > ebdaAddr || st.RSP <= cmdlineAddr+cmdlineMax {
		t.Errorf("RSP %#x", st.RSP)
	}
	// CPL3, IOPL 3, IF 0, long mode, SSE usable.
	if st.CS.DPL != 3 || st.CS.Selector&3 != 3 || st.CS.L != 1 || st.CS.DB != 0 || st.SS.DPL != 3 || st.SS.Selector&3 != 3 {
		t.Errorf("CS %+v SS %+v", st.CS, st.SS)
	}
	for _, s := range []Segment{st.DS, st.ES, st.FS, st.GS} {
		if s != segUserData {
			t.Errorf("data segment %+v", s)
		}
	}
	if st.RFLAGS&(3<<12) != 3<<12 || st.RFLAGS&(1<<9) != 0 || st.RFLAGS&2 == 0 {
		t.Errorf("RFLAGS %#x", st.RFLAGS)
	}
	if st.EFER != eferLME|eferLMA || st.CR0&(cr0PE|cr0PG) != cr0PE|cr0PG || st.CR0&(1<<2) != 0 ||
		st.CR4&(cr4PAE|cr4OSFXSR|cr4OSXMMEXCPT) != cr4PAE|cr4OSFXSR|cr4OSXMMEXCPT {
		t.Errorf("CR0 %#x CR4 %#x EFER %#x", st.CR0, st.CR4, st.EFER)
	}
	checkGDTMatches(t, l.Low, st)

	// Every page the guest can touch is a user page mapped to itself: RAM,
	// its args, its stack, the MMIO window up to 4 GiB.
	for _, va := range []uint64{0, cmdlineAddr, st.RSP - 8, 0x400000, 0x413fff, 256*mib - 1, 3 * gib, 0xe0000000, 0xfebff000, 0xfec00000, 0xfee00000, 4*gib - 1} {
		pa, user, ok := translate(l.Low, st.CR3, va)
		if !ok || !user || pa != va {
			t.Errorf("va %#x -> %#x user %v mapped %v", va, pa, user, ok)
		}
	}
	if _, _, ok := translate(l.Low, st.CR3, 4*gib); ok {
		t.Error("4 GiB mapped with no RAM there")
	}

	// TSS: RSP0 is the exception stack; an I/O bitmap within the limit
	// allows all 65536 ports (PVM ignores IOPL) and ends in 0xff.
	tss := l.Low[st.TR.Base:]
	iomap := uint32(le.Uint16(tss[0x66:]))
	if le.Uint64(tss[4:]) != ring0StackTop || iomap < 0x68 || st.TR.Limit != iomap+8192 || tss[st.TR.Limit] != 0xff {
		t.Fatalf("TSS at %#x limit %#x RSP0 %#x iomap %#x", st.TR.Base, st.TR.Limit, le.Uint64(tss[4:]), iomap)
	}
	if n := bytes.Count(tss[iomap:iomap+8192], []byte{0}); n != 8192 {
		t.Errorf("I/O bitmap denies ports (%d of its 8192 bytes are zero)", n)
	}
	if st.TR.Base+uint64(st.TR.Limit) >= ebdaAddr || st.TR.Base < st.RSP {
		t.Errorf("TSS %#x-%#x overlaps the stack (RSP %#x) or the EBDA", st.TR.Base, st.TR.Base+uint64(st.TR.Limit), st.RSP)
	}
	// IDT: 256 present ring-0 interrupt gates through the 64-bit kernel code
	// segment, each to a stub that reports its vector on the exit port.
	if st.IDTBase != idtAddr || st.IDTLimit != 256*16-1 {
		t.Fatalf("IDT %#x limit %#x", st.IDTBase, st.IDTLimit)
	}
	for v := 0; v < 256; v++ {
		g := l.Low[idtAddr+16*v:]
		handler := uint64(le.Uint16(g)) | uint64(le.Uint16(g[6:]))<<16 | uint64(le.Uint32(g[8:]))<<32
		if le.Uint16(g[2:]) != selCode64 || g[5] != 0x8e || g[4] != 0 {
			t.Fatalf("gate %d: selector %#x attr %#x ist %d", v, le.Uint16(g[2:]), g[5], g[4])
		}
		stub := l.Low[handler : handler+8]
		want := []byte{0xb0, byte(v), 0x66, 0xba, 0x01, 0x05, 0xee, 0xf4}
		if !bytes.Equal(stub, want) {
			t.Fatalf("vector %d stub % x, want % x", v, stub, want)
		}
		if got, ok := UserExceptionVector(handler + 7); !ok || got != v {
			t.Errorf("UserExceptionVector(%#x) = %d %v", handler+7, got, ok)
		}
		if _, _, ok := translate(l.Low, st.CR3, handler); !ok {
			t.Errorf("stub %d unmapped", v)
		}
	}
	if _, ok := UserExceptionVector(0x400010); ok {
		t.Error("the guest's own code taken for an exception stub")
	}
	// The kernel code segment the gates use is 64-bit ring 0.
	if cs := decodeDescriptor(le.Uint64(l.Low[gdtAddr+selCode64:])); cs.L != 1 || cs.DPL != 0 || cs.Present != 1 {
		t.Errorf("gate code segment %+v", cs)
	}
}

func TestLoadUserHighRAM(t *testing.T) {
	l := newLayout(t, 6*gib, 1)
	st, err := LoadUser(l, Bytes(buildELF(0x400000, 0, userText)), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, va := range []uint64{4 * gib, 7*gib - 1} {
		if pa, user, ok := translate(l.Low, st.CR3, va); !ok || !user || pa != va {
			t.Errorf("high RAM va %#x -> %#x user %v mapped %v", va, pa, user, ok)
		}
	}
	if _, _, ok := translate(l.Low, st.CR3, 7*gib); ok {
		t.Error("mapped past the end of RAM")
	}
}

func TestLoadUserErrors(t *testing.T) {
	cases := []struct {
		name   string
		mem    uint64
		elf    []byte
		args   string
		expect string
	}{
		{"not an ELF", 64 * mib, defaultBz().build(), "", "not an ELF"},
		{"vaddr differs from paddr", 64 * mib, buildELF(0x400000, 0, elfSeg{vaddr: 0xffffffff80400000, paddr: 0x400000, data: []byte{1}}), "", "link it at its load address"},
		{"below 1 MiB", 64 * mib, buildELF(0x8000, 0, elfSeg{vaddr: 0x8000, paddr: 0x8000, data: []byte{1}}), "", "below 1 MiB"},
		{"past memory", 4 * mib, buildELF(0x400000, 0, userText), "", "raise --mem"},
		{"entry outside", 64 * mib, buildELF(0x900000, 0, userText), "", "entry"},
		{"args too long", 64 * mib, buildELF(0x400000, 0, userText), strings.Repeat("a", 70000), "at most 65535"},
		{"too much RAM to map", 24 * gib, buildELF(0x400000, 0, userText), "", "lower --mem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadUser(newLayout(t, c.mem, 1), Bytes(c.elf), c.args)
			if err == nil || !strings.Contains(err.Error(), c.expect) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line with %q", err, c.expect)
			}
		})
	}
}
