package boot

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// readArtifact reads a build output named by env, or at the repo-relative
// default, or skips saying how to make it.
func readArtifact(t *testing.T, env, def, how string) []byte {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join("..", def)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no %s at %s: %s (or set %s)", filepath.Base(def), path, how, env)
	}
	return b
}

// elfSymbol finds a symbol's value through the section headers (the test
// may use debug/elf-like parsing; the loader does not need symbols).
func elfSymbol(t *testing.T, b []byte, name string) uint64 {
	t.Helper()
	le := binary.LittleEndian
	shoff, shentsize, shnum := le.Uint64(b[40:]), uint64(le.Uint16(b[58:])), uint64(le.Uint16(b[60:]))
	for i := uint64(0); i < shnum; i++ {
		sh := b[shoff+i*shentsize:]
		if le.Uint32(sh[4:]) != 2 { // SHT_SYMTAB
			continue
		}
		off, sz, link, entsize := le.Uint64(sh[24:]), le.Uint64(sh[32:]), le.Uint32(sh[40:]), le.Uint64(sh[56:])
		str := b[shoff+uint64(link)*shentsize:]
		stroff := le.Uint64(str[24:])
		for s := off; s+entsize <= off+sz; s += entsize {
			n := stroff + uint64(le.Uint32(b[s:]))
			end := n
			for b[end] != 0 {
				end++
			}
			if string(b[n:end]) == name {
				return le.Uint64(b[s+8:])
			}
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

// TestBenchGuestUserStart loads the real bench guest (guest/bench) both
// ways: LoadUser enters _start at CPL3, Load takes its PVH note.
func TestBenchGuestUserStart(t *testing.T) {
	elf := readArtifact(t, "TINYVMM_BENCH_ELF", "out/guest/bench.elf", "run guest/bench/build.sh")
	l := newLayout(t, 256*mib, 1)
	st, err := LoadUser(l, Bytes(elf), "mode=tx")
	if err != nil {
		t.Fatal(err)
	}
	if start := elfSymbol(t, elf, "_start"); st.RIP != start {
		t.Errorf("RIP %#x, _start is %#x", st.RIP, start)
	}
	for _, va := range []uint64{st.RIP, elfSymbol(t, elf, "stack_top") - 8, 0xfe000000} {
		if pa, user, ok := translate(l.Low, st.CR3, va); !ok || !user || pa != va {
			t.Errorf("va %#x -> %#x user %v mapped %v", va, pa, user, ok)
		}
	}
	st, err = Load(newLayout(t, 256*mib, 1), Image{Kernel: Bytes(elf), Cmdline: "mode=rx"})
	if err != nil {
		t.Fatal(err)
	}
	if st.CS.L != 0 || st.CR0&cr0PG != 0 || st.RBX != startInfoAddr {
		t.Errorf("not a PVH start: CS %+v CR0 %#x RBX %#x", st.CS, st.CR0, st.RBX)
	}
}

// TestGuestVmlinuxPVH loads the guest kernel that make guest builds, an
// uncompressed vmlinux with a PVH note.
func TestGuestVmlinuxPVH(t *testing.T) {
	k := readArtifact(t, "TINYVMM_VMLINUX", "out/guest/vmlinux", "run make guest")
	kernel, err := parseELF(Bytes(k))
	if err != nil {
		t.Fatal(err)
	}
	if !kernel.HasPVH {
		t.Fatal("vmlinux has no XEN_ELFNOTE_PHYS32_ENTRY: build it with CONFIG_PVH=y")
	}
	l := newLayout(t, 256*mib, 2)
	st, err := Load(l, Image{Kernel: Bytes(k), Initrd: Bytes(pattern(mib, 1)), Cmdline: "console=ttyS0"})
	if err != nil {
		t.Fatal(err)
	}
	if st.RIP != kernel.PVHEntry || st.RBX != startInfoAddr {
		t.Errorf("RIP %#x RBX %#x, PVH entry %#x", st.RIP, st.RBX, kernel.PVHEntry)
	}
	t.Logf("vmlinux: %d segments, PVH entry %#x, e_entry %#x", len(kernel.Segments), kernel.PVHEntry, kernel.Entry)
}

// TestGuestBzImage loads the bzImage that make guest builds next to it.
func TestGuestBzImage(t *testing.T) {
	k := readArtifact(t, "TINYVMM_GUEST_BZIMAGE", "out/guest/bzImage", "run make guest")
	h, err := parseSetupHeader(k, uint64(len(k)))
	if err != nil {
		t.Fatal(err)
	}
	l := newLayout(t, 256*mib, 1)
	st, err := Load(l, Image{Kernel: Bytes(k), Cmdline: "console=ttyS0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := h.loadAddress(256*mib) + kernel64Offset; st.RIP != want {
		t.Errorf("RIP %#x, want %#x", st.RIP, want)
	}
}
