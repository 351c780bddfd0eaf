package boot

import (
	"bytes"
	"testing"
)

func TestBzImageBootParams(t *testing.T) {
	l := newLayout(t, 256*mib, 2)
	spec := defaultBz()
	kernel := spec.build()
	initrd := pattern(3*mib+123, 0x5a)
	const cmdline = "console=ttyS0 ip=dhcp"
	st, err := Load(l, Image{Kernel: Bytes(kernel), Initrd: Bytes(initrd), Cmdline: cmdline})
	if err != nil {
		t.Fatal(err)
	}
	// Relocatable and fits: loaded at pref_address, entered at +0x200.
	pm := kernel[(27+1)*512:]
	if !bytes.Equal(l.Low[16*mib:16*mib+len(pm)], pm) {
		t.Fatal("protected-mode kernel not at pref_address (16 MiB)")
	}
	if st.RIP != 16*mib+0x200 || st.RSI != zeroPageAddr {
		t.Fatalf("RIP %#x RSI %#x, want %#x and %#x", st.RIP, st.RSI, 16*mib+0x200, zeroPageAddr)
	}
	zp := l.Low[zeroPageAddr : zeroPageAddr+zpSize]

	// The setup header is the image's, 0x1f1 up to 0x202+jump, but for the
	// fields a loader fills in.
	filled := map[int]bool{}
	for _, f := range []struct{ off, n int }{{hdrTypeOfLoader, 1}, {hdrCmdLinePtr, 4}, {hdrRamdiskImage, 4}, {hdrRamdiskSize, 4}} {
		for i := 0; i < f.n; i++ {
			filled[f.off+i] = true
		}
	}
	for off := hdrStart; off < 0x26c; off++ {
		if !filled[off] && zp[off] != kernel[off] {
			t.Errorf("zero page byte %#x = %#x, image has %#x", off, zp[off], kernel[off])
		}
	}
	if le.Uint32(zp[0x264:]) != 0xdeadbeef {
		t.Error("handover_offset (inside the header) not copied")
	}
	for off := 0x26c; off < zpE820Table; off++ {
		if zp[off] != 0 {
			t.Fatalf("zero page byte %#x past the header = %#x, want 0", off, zp[off])
		}
	}
	if zp[hdrTypeOfLoader] != 0xff {
		t.Errorf("type_of_loader %#x", zp[hdrTypeOfLoader])
	}
	ptr := le.Uint32(zp[hdrCmdLinePtr:])
	if ptr != cmdlineAddr || le.Uint32(zp[zpExtCmdLinePtr:]) != 0 {
		t.Fatalf("cmd_line_ptr %#x", ptr)
	}
	if got := string(l.Low[ptr : ptr+uint32(len(cmdline))+1]); got != cmdline+"\x00" {
		t.Errorf("command line %q", got)
	}
	// Initrd: high, page aligned, below initrd_addr_max, above the kernel.
	ri, rs := uint64(le.Uint32(zp[hdrRamdiskImage:])), uint64(le.Uint32(zp[hdrRamdiskSize:]))
	if rs != uint64(len(initrd)) || le.Uint32(zp[zpExtRamdiskImage:]) != 0 || le.Uint32(zp[zpExtRamdiskSize:]) != 0 {
		t.Fatalf("ramdisk size %d ext fields %#x %#x", rs, le.Uint32(zp[zpExtRamdiskImage:]), le.Uint32(zp[zpExtRamdiskSize:]))
	}
	if ri%pageSize != 0 || ri+rs > uint64(len(l.Low)) || uint64(len(l.Low))-(ri+rs) >= pageSize || ri < 16*mib+4*mib {
		t.Errorf("initrd at %#x..%#x in %#x bytes of RAM", ri, ri+rs, len(l.Low))
	}
	if !bytes.Equal(l.Low[ri:ri+rs], initrd) {
		t.Error("initrd contents")
	}
	checkE820(t, zp, []e820Entry{{0, 0x9fc00, 1}, {0x9fc00, 0x60400, 2}, {mib, 255 * mib, 1}})
	checkLongMode(t, l.Low, st)
}

func checkE820(t *testing.T, zp []byte, want []e820Entry) {
	t.Helper()
	if int(zp[zpE820Entries]) != len(want) {
		t.Fatalf("e820_entries %d, want %d", zp[zpE820Entries], len(want))
	}
	for i, w := range want {
		e := zp[zpE820Table+20*i:]
		got := e820Entry{le.Uint64(e), le.Uint64(e[8:]), le.Uint32(e[16:])}
		if got != w {
			t.Errorf("e820[%d] = %+v, want %+v", i, got, w)
		}
	}
}

// checkLongMode checks the 64-bit entry state: flat __BOOT_CS/__BOOT_DS,
// paging that identity-maps the first 4 GiB, and a GDT that agrees.
func checkLongMode(t *testing.T, mem []byte, st CPUState) {
	t.Helper()
	if st.CS.Selector != 0x10 || st.CS.L != 1 || st.CS.DB != 0 || st.CS.DPL != 0 {
		t.Errorf("CS %+v", st.CS)
	}
	for _, s := range []Segment{st.DS, st.ES, st.SS} {
		if s.Selector != 0x18 || s.Type != 3 || s.Present != 1 || s.Base != 0 || s.Limit != 0xffffffff {
			t.Errorf("data segment %+v", s)
		}
	}
	if st.CR0&(cr0PE|cr0PG) != cr0PE|cr0PG || st.CR4&cr4PAE == 0 || st.EFER != eferLME|eferLMA {
		t.Errorf("CR0 %#x CR4 %#x EFER %#x", st.CR0, st.CR4, st.EFER)
	}
	if st.RFLAGS != 2 {
		t.Errorf("RFLAGS %#x", st.RFLAGS)
	}
	for _, va := range []uint64{0, 0x7000, 16*mib + 0x200, 0x9fc00, 3*gib - 1, 0xfec00000, 4*gib - 1} {
		pa, user, ok := translate(mem, st.CR3, va)
		if !ok || pa != va || user {
			t.Errorf("va %#x -> pa %#x user %v mapped %v; want identity, supervisor", va, pa, user, ok)
		}
	}
	if _, _, ok := translate(mem, st.CR3, 4*gib); ok {
		t.Error("4 GiB is mapped; the kernel map covers only the first 4 GiB")
	}
	// The boot protocol's descriptors, bit for bit.
	if got := le.Uint64(mem[gdtAddr+0x10:]); got != 0x00af9b000000ffff {
		t.Errorf("GDT 0x10 = %#x", got)
	}
	if got := le.Uint64(mem[gdtAddr+0x18:]); got != 0x00cf93000000ffff {
		t.Errorf("GDT 0x18 = %#x", got)
	}
	checkGDTMatches(t, mem, st)
}

func TestBzImageLoadAddress(t *testing.T) {
	cases := []struct {
		name string
		edit func(*bzSpec)
		mem  uint64
		want uint64
	}{
		{"relocatable at pref_address", func(*bzSpec) {}, 64 * mib, 16 * mib},
		{"not relocatable", func(s *bzSpec) { s.relocatable = false }, 64 * mib, mib},
		{"pref_address below 1 MiB", func(s *bzSpec) { s.prefAddress = 0x10000 }, 32 * mib, mib},
		{"pref_address misaligned", func(s *bzSpec) { s.prefAddress = 16*mib + 4096 }, 64 * mib, mib},
		{"old protocol, no pref_address", func(s *bzSpec) { s.version = 0x209; s.xloadflags = 0 }, 64 * mib, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := defaultBz()
			c.edit(&s)
			l := newLayout(t, c.mem, 1)
			k := s.build()
			st, err := Load(l, Image{Kernel: Bytes(k)})
			if c.want == 0 {
				if err == nil {
					t.Fatal("a 2.09 kernel has no XLF_KERNEL_64 and must be refused")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.RIP != c.want+kernel64Offset {
				t.Errorf("RIP %#x, want %#x", st.RIP, c.want+kernel64Offset)
			}
			off := (int(s.setupSects) + 1) * 512
			if !bytes.Equal(l.Low[c.want:c.want+uint64(len(k)-off)], k[off:]) {
				t.Error("kernel not at the load address")
			}
		})
	}
}

func TestInitrdPlacement(t *testing.T) {
	t.Run("below initrd_addr_max", func(t *testing.T) {
		s := defaultBz()
		s.initrdAddrMax = 48*mib - 1
		l := newLayout(t, 128*mib, 1)
		if _, err := Load(l, Image{Kernel: Bytes(s.build()), Initrd: Bytes(pattern(5000, 1))}); err != nil {
			t.Fatal(err)
		}
		zp := l.Low[zeroPageAddr:]
		ri, rs := le.Uint32(zp[hdrRamdiskImage:]), le.Uint32(zp[hdrRamdiskSize:])
		if ri != 48*mib-2*pageSize || rs != 5000 {
			t.Errorf("initrd at %#x size %d, want %#x", ri, rs, 48*mib-2*pageSize)
		}
	})
	t.Run("XLF_CAN_BE_LOADED_ABOVE_4G ignores initrd_addr_max", func(t *testing.T) {
		s := defaultBz()
		s.initrdAddrMax = 48*mib - 1
		s.xloadflags |= xlfAbove4G
		l := newLayout(t, 128*mib, 1)
		if _, err := Load(l, Image{Kernel: Bytes(s.build()), Initrd: Bytes(pattern(pageSize, 1))}); err != nil {
			t.Fatal(err)
		}
		if ri := le.Uint32(l.Low[zeroPageAddr+hdrRamdiskImage:]); ri != 128*mib-pageSize {
			t.Errorf("initrd at %#x, want the top page", ri)
		}
	})
	t.Run("no initrd", func(t *testing.T) {
		l := newLayout(t, 64*mib, 1)
		if _, err := Load(l, Image{Kernel: Bytes(defaultBz().build())}); err != nil {
			t.Fatal(err)
		}
		if le.Uint32(l.Low[zeroPageAddr+hdrRamdiskImage:]) != 0 || le.Uint32(l.Low[zeroPageAddr+hdrRamdiskSize:]) != 0 {
			t.Error("ramdisk fields set without an initrd")
		}
	})
}

func TestE820AboveFourGiB(t *testing.T) {
	l := newLayout(t, 5*gib, 1) // 3 GiB low: sparse, only touched pages get memory
	if _, err := Load(l, Image{Kernel: Bytes(defaultBz().build()), Initrd: Bytes(pattern(100, 3))}); err != nil {
		t.Fatal(err)
	}
	zp := l.Low[zeroPageAddr:]
	checkE820(t, zp, []e820Entry{{0, 0x9fc00, 1}, {0x9fc00, 0x60400, 2}, {mib, 3*gib - mib, 1}, {4 * gib, 2 * gib, 1}})
	// initrd_addr_max 0x7fffffff keeps it under 2 GiB even with 3 GiB low.
	if ri := le.Uint32(zp[hdrRamdiskImage:]); ri != 2*gib-pageSize {
		t.Errorf("initrd at %#x, want %#x", ri, 2*gib-pageSize)
	}
}
