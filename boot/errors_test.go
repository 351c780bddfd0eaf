package boot

import (
	"strings"
	"testing"
)

// Every refused input gets one line that names the problem.
func TestLoadErrors(t *testing.T) {
	bz := func(edit func(*bzSpec)) []byte {
		s := defaultBz()
		edit(&s)
		return s.build()
	}
	good := defaultBz().build()
	withByte := func(b []byte, off int, v byte) []byte {
		c := append([]byte(nil), b...)
		c[off] = v
		return c
	}
	goodELF := buildELF(16*mib, 16*mib, elfText)
	elfWith := func(off int, v byte) []byte { return withByte(goodELF, off, v) }

	cases := []struct {
		name   string
		mem    uint64
		cpus   int
		img    Image
		expect string
	}{
		{"empty file", 64 * mib, 1, Image{}, "empty"},
		{"not a kernel", 64 * mib, 1, Image{Kernel: Bytes([]byte(strings.Repeat("hello world\n", 100)))}, "not a Linux kernel"},
		{"gzip", 64 * mib, 1, Image{Kernel: Bytes([]byte{0x1f, 0x8b, 8, 0, 0, 0})}, "gzip"},
		{"truncated before the header", 64 * mib, 1, Image{Kernel: Bytes([]byte("MZ\x00\x00"))}, "truncated"},
		{"truncated header", 64 * mib, 1, Image{Kernel: Bytes(good[:0x250])}, "truncated"},
		{"truncated kernel", 64 * mib, 1, Image{Kernel: Bytes(good[:len(good)-100])}, "truncated"},
		{"no boot flag", 64 * mib, 1, Image{Kernel: Bytes(withByte(good, hdrBootFlag, 0))}, "0xAA55"},
		{"protocol too old", 64 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.version = 0x205 }))}, "boot protocol 2.05"},
		{"zImage", 64 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.loadflags = 0 }))}, "zImage"},
		{"no 64-bit entry", 64 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.xloadflags = 0 }))}, "XLF_KERNEL_64"},
		{"kernel's init_size past RAM from pref_address", 32 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.initSize = 20 * mib }))}, "kernel (20 MiB at 16 MiB) does not fit in 32 MiB of guest memory; raise --mem"},
		{"kernel file bigger than RAM", 4 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.pmSize = 4 * mib }))}, "kernel (4 MiB at 1 MiB) does not fit in 4 MiB"},
		{"kernel too big", 64 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.initSize = 100 * mib }))}, "raise --mem"},
		{"initrd too big", 256 * mib, 1, Image{Kernel: Bytes(good), Initrd: Bytes(bigZero(t, 300*mib))}, "initrd (300 MiB) does not fit in 256 MiB of guest memory; raise --mem"},
		{"initrd over initrd_addr_max", 256 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.initrdAddrMax = 24*mib - 1 })), Initrd: Bytes(bigZero(t, 8*mib))}, "initrd limit"},
		{"command line too long", 64 * mib, 1, Image{Kernel: Bytes(bz(func(s *bzSpec) { s.cmdlineSize = 10 })), Cmdline: "01234567890"}, "at most 10"},
		{"ELF command line too long", 64 * mib, 1, Image{Kernel: Bytes(goodELF), Cmdline: strings.Repeat("x", 2048)}, "at most 2047"},
		{"memory too small", mib, 1, Image{Kernel: Bytes(good)}, "too small"},
		{"no CPUs", 64 * mib, 0, Image{Kernel: Bytes(good)}, "0 CPUs"},
		{"too many CPUs", 64 * mib, 255, Image{Kernel: Bytes(good)}, "255 CPUs"},
		{"ELF 32-bit", 64 * mib, 1, Image{Kernel: Bytes(elfWith(4, 1))}, "64-bit"},
		{"ELF big-endian", 64 * mib, 1, Image{Kernel: Bytes(elfWith(5, 2))}, "64-bit little-endian"},
		{"ELF for ARM", 64 * mib, 1, Image{Kernel: Bytes(elfWith(18, 183))}, "machine 183"},
		{"ELF truncated header", 64 * mib, 1, Image{Kernel: Bytes(goodELF[:40])}, "truncated"},
		{"ELF truncated program headers", 64 * mib, 1, Image{Kernel: Bytes(goodELF[:elfHeaderLen+10])}, "truncated"},
		{"ELF truncated segment", 64 * mib, 1, Image{Kernel: Bytes(goodELF[:len(goodELF)-200])}, "truncated"},
		{"ELF no program headers", 64 * mib, 1, Image{Kernel: Bytes(elfWith(56, 0))}, "program header"},
		{"ELF no loadable segment", 64 * mib, 1, Image{Kernel: Bytes(elfWith(elfHeaderLen, 6))}, "no loadable"},
		{"ELF segment below 1 MiB", 64 * mib, 1, Image{Kernel: Bytes(buildELF(0x10000, 0, elfSeg{vaddr: 0x10000, paddr: 0x10000, data: []byte{1}}))}, "below 1 MiB"},
		{"ELF segments overlap", 64 * mib, 1, Image{Kernel: Bytes(buildELF(16*mib, 0, elfText, elfSeg{vaddr: 0x1000000, paddr: 16*mib + 4096, data: []byte{1}}))}, "segments 0 and 1 overlap at 0x1001000"},
		{"ELF segment past memory", 16 * mib, 1, Image{Kernel: Bytes(goodELF)}, "raise --mem"},
		{"ELF entry outside segments", 64 * mib, 1, Image{Kernel: Bytes(buildELF(0x5000000, 0, elfText))}, "entry"},
		{"PVH entry outside segments", 64 * mib, 1, Image{Kernel: Bytes(buildELF(16*mib, 0x5000000, elfText))}, "PVH entry"},
		{"ELF initrd too big", 64 * mib, 1, Image{Kernel: Bytes(goodELF), Initrd: Bytes(bigZero(t, 60*mib))}, "initrd (60 MiB) does not fit in 64 MiB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLayout(t, c.mem, c.cpus)
			_, err := Load(l, c.img)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, c.expect) || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "boot: ") {
				t.Errorf("error %q, want one line with %q", msg, c.expect)
			}
		})
	}
}

func TestLayoutMismatch(t *testing.T) {
	l := newLayout(t, 64*mib, 1)
	l.MemSize = 128 * mib
	if _, err := Load(l, Image{Kernel: Bytes(defaultBz().build())}); err == nil || !strings.Contains(err.Error(), "Layout.Low") {
		t.Fatalf("got %v", err)
	}
}
