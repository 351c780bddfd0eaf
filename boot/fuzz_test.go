package boot

import "testing"

// FuzzLoad feeds arbitrary kernels and command lines: Load must refuse or
// accept them, never panic, and never write outside Low (a slice bound
// would panic).
func FuzzLoad(f *testing.F) {
	f.Add(defaultBz().build()[:0x600], "console=ttyS0")
	f.Add(buildELF(16*mib, 16*mib+0x40, elfText, elfData), "")
	f.Add(buildELF(0xffffffff81000100, 0, elfText, elfData), "x")
	f.Add([]byte("MZ"), "")
	small := defaultBz()
	small.pmSize = 256
	small.setupSects = 1
	f.Add(small.build(), "root=/dev/vda")
	l := newLayout(f, 24*mib, 2)
	initrd := pattern(pageSize+1, 3)
	f.Fuzz(func(t *testing.T, kernel []byte, cmdline string) {
		st, err := Load(l, Image{Kernel: Bytes(kernel), Initrd: Bytes(initrd), Cmdline: cmdline})
		if err == nil && st.RIP >= uint64(len(l.Low)) {
			t.Fatalf("accepted with entry %#x outside RAM", st.RIP)
		}
	})
}

// FuzzUserStart does the same for the user-mode start.
func FuzzUserStart(f *testing.F) {
	f.Add(buildELF(0x400010, 0x400000, userText, userData), "mode=tx")
	f.Add(buildELF(0x400000, 0, userText), "")
	l := newLayout(f, 24*mib, 1)
	f.Fuzz(func(t *testing.T, elf []byte, args string) {
		st, err := LoadUser(l, Bytes(elf), args)
		if err == nil && (st.RIP >= uint64(len(l.Low)) || st.CS.DPL != 3) {
			t.Fatalf("accepted with entry %#x CS.DPL %d", st.RIP, st.CS.DPL)
		}
	})
}
