package boot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// debianBzImage reads the Debian kernel that testdata/fetch-debian-kernel.sh
// caches, or skips.
func debianBzImage(t *testing.T) []byte {
	t.Helper()
	path := os.Getenv("TINYVMM_DEBIAN_BZIMAGE")
	if path == "" {
		path = filepath.Join("..", "testdata", "cache", "debian-vmlinuz")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no Debian bzImage at %s: run boot/testdata/fetch-debian-kernel.sh", path)
	}
	return b
}

func TestDebianBzImage(t *testing.T) {
	k := debianBzImage(t)
	h, err := parseSetupHeader(k, uint64(len(k)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("protocol %d.%02d, setup_sects %d, loadflags %#x, xloadflags %#x, relocatable %v, alignment %#x, pref_address %#x, init_size %s, cmdline_size %d, initrd_addr_max %#x, header ends %#x",
		h.Version>>8, h.Version&0xff, h.SetupSects, h.Loadflags, h.Xloadflags, h.Relocatable, h.KernelAlignment, h.PrefAddress, size(uint64(h.InitSize)), h.CmdlineSize, h.InitrdAddrMax, h.HeaderEnd)
	// What every Debian 6.1 amd64 kernel declares.
	if h.Version < 0x20f {
		t.Errorf("protocol %#x, Linux 6.1 speaks 2.15", h.Version)
	}
	if h.SetupSects < 4 || h.KernelOffset != (h.SetupSects+1)*512 || h.KernelOffset >= len(k) {
		t.Errorf("setup_sects %d, kernel at %#x of %#x", h.SetupSects, h.KernelOffset, len(k))
	}
	if h.Xloadflags&xlfKernel64 == 0 || h.Xloadflags&xlfAbove4G == 0 || !h.Relocatable {
		t.Errorf("xloadflags %#x relocatable %v: want XLF_KERNEL_64, XLF_CAN_BE_LOADED_ABOVE_4G, relocatable", h.Xloadflags, h.Relocatable)
	}
	if h.PrefAddress != 0x1000000 || h.KernelAlignment != 0x200000 {
		t.Errorf("pref_address %#x kernel_alignment %#x", h.PrefAddress, h.KernelAlignment)
	}
	if h.InitSize < uint32(len(k)-h.KernelOffset) || h.InitSize > 256*mib {
		t.Errorf("init_size %#x for a %#x-byte kernel", h.InitSize, len(k)-h.KernelOffset)
	}
	if h.CmdlineSize != 2047 || h.HeaderEnd < hdrInitSize+4 {
		t.Errorf("cmdline_size %d header end %#x", h.CmdlineSize, h.HeaderEnd)
	}

	l := newLayout(t, 512*mib, 2)
	initrd := pattern(5*mib, 9)
	st, err := Load(l, Image{Kernel: Bytes(k), Initrd: Bytes(initrd), Cmdline: "console=ttyS0"})
	if err != nil {
		t.Fatal(err)
	}
	if st.RIP != 0x1000000+0x200 {
		t.Errorf("RIP %#x, want the 64-bit entry at pref_address + 0x200", st.RIP)
	}
	if !bytes.Equal(l.Low[0x1000000:0x1000000+len(k)-h.KernelOffset], k[h.KernelOffset:]) {
		t.Error("kernel not at 16 MiB")
	}
	zp := l.Low[zeroPageAddr:]
	if !bytes.Equal(zp[hdrStart:hdrTypeOfLoader], k[hdrStart:hdrTypeOfLoader]) || zp[hdrTypeOfLoader] != 0xff {
		t.Error("setup header not copied")
	}
	// The kernel's own version string pointer (kernel_version) survives.
	if le.Uint16(zp[0x20e:]) != le.Uint16(k[0x20e:]) {
		t.Error("kernel_version field changed")
	}
	ri := uint64(le.Uint32(zp[hdrRamdiskImage:]))
	if ri < 0x1000000+uint64(h.InitSize) || ri+uint64(len(initrd)) > 512*mib || ri%pageSize != 0 {
		t.Errorf("initrd at %#x overlaps the kernel's init_size or leaves RAM", ri)
	}
	checkE820(t, zp, e820Map(l))
	checkLongMode(t, l.Low, st)
	checkMPTable(t, l.Low, 2)
}
