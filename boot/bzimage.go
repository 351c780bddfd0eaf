package boot

import (
	"encoding/binary"
	"fmt"
)

// Setup header offsets (Documentation/arch/x86/boot.rst), the same in the
// bzImage file and in boot_params.
const (
	hdrStart          = 0x1f1
	hdrSetupSects     = 0x1f1
	hdrSyssize        = 0x1f4
	hdrBootFlag       = 0x1fe
	hdrJump           = 0x200 // its second byte + 0x202 is where the header ends
	hdrMagic          = 0x202
	hdrVersion        = 0x206
	hdrTypeOfLoader   = 0x210
	hdrLoadflags      = 0x211
	hdrCode32Start    = 0x214
	hdrRamdiskImage   = 0x218
	hdrRamdiskSize    = 0x21c
	hdrHeapEndPtr     = 0x224
	hdrCmdLinePtr     = 0x228
	hdrInitrdAddrMax  = 0x22c
	hdrKernelAlign    = 0x230
	hdrRelocatable    = 0x234
	hdrXloadflags     = 0x236
	hdrCmdlineSize    = 0x238
	hdrPrefAddress    = 0x258
	hdrInitSize       = 0x260
	hdrMinLen         = 0x264      // enough to read every field above
	hdrMaxEnd         = 0x290      // boot_params.edd_mbr_sig_buffer follows the header
	hdrMagicValue     = 0x53726448 // "HdrS"
	bootFlagValue     = 0xaa55
	minVersion        = 0x206
	loadedHigh        = 1 << 0
	xlfKernel64       = 1 << 0
	xlfAbove4G        = 1 << 1
	typeOfLoaderOther = 0xff
	kernel64Offset    = 0x200 // the 64-bit entry, from the load address
)

// setupHeader is what Load reads from a bzImage.
type setupHeader struct {
	Version         uint16
	SetupSects      int
	Loadflags       uint8
	Xloadflags      uint16
	Relocatable     bool
	KernelAlignment uint32
	PrefAddress     uint64
	InitSize        uint32
	InitrdAddrMax   uint32
	CmdlineSize     uint32
	HeaderEnd       int // end of the setup header in the file (0x202 + jump offset)
	KernelOffset    int // where the protected-mode kernel starts in the file
}

// isBzImage says whether b carries the setup header magic.
func isBzImage(b []byte) bool {
	return len(b) >= hdrMagic+4 && binary.LittleEndian.Uint32(b[hdrMagic:]) == hdrMagicValue
}

// parseSetupHeader validates a bzImage's setup header. b is the file's
// start (at least up to hdrMaxEnd when the file is that long), size the
// whole file's.
func parseSetupHeader(b []byte, size uint64) (setupHeader, error) {
	le := binary.LittleEndian
	var h setupHeader
	if len(b) < hdrMinLen {
		return h, fmt.Errorf("boot: bzImage is truncated (%d bytes, shorter than its setup header)", size)
	}
	if le.Uint16(b[hdrBootFlag:]) != bootFlagValue {
		return h, fmt.Errorf("boot: bzImage has no boot flag 0xAA55; the file is damaged")
	}
	h.Version = le.Uint16(b[hdrVersion:])
	if h.Version < minVersion {
		return h, fmt.Errorf("boot: kernel uses boot protocol %d.%02d; tinyvmm needs 2.06 or newer", h.Version>>8, h.Version&0xff)
	}
	h.SetupSects = int(b[hdrSetupSects])
	if h.SetupSects == 0 {
		h.SetupSects = 4 // the protocol's meaning of 0
	}
	h.Loadflags = b[hdrLoadflags]
	if h.Loadflags&loadedHigh == 0 {
		return h, fmt.Errorf("boot: kernel is a zImage (loads low); tinyvmm needs a bzImage")
	}
	if h.Version >= 0x20c {
		h.Xloadflags = le.Uint16(b[hdrXloadflags:])
	}
	if h.Xloadflags&xlfKernel64 == 0 {
		return h, fmt.Errorf("boot: bzImage has no 64-bit entry (XLF_KERNEL_64); tinyvmm boots x86-64 kernels")
	}
	h.Relocatable = b[hdrRelocatable] != 0
	h.KernelAlignment = le.Uint32(b[hdrKernelAlign:])
	h.InitrdAddrMax = le.Uint32(b[hdrInitrdAddrMax:])
	h.CmdlineSize = le.Uint32(b[hdrCmdlineSize:])
	if h.Version >= 0x20a {
		h.PrefAddress = le.Uint64(b[hdrPrefAddress:])
		h.InitSize = le.Uint32(b[hdrInitSize:])
	}
	// The header ends where the jump at 0x200 lands; boot_params leaves room up to 0x290.
	h.HeaderEnd = min(hdrMagic+int(b[hdrJump+1]), hdrMaxEnd)
	h.KernelOffset = (h.SetupSects + 1) * 512
	syssize := uint64(le.Uint32(b[hdrSyssize:])) * 16
	if size < uint64(h.KernelOffset)+syssize || size <= uint64(h.KernelOffset) {
		return h, fmt.Errorf("boot: bzImage is truncated: %d bytes, its header says %d", size, uint64(h.KernelOffset)+syssize)
	}
	if h.InitSize == 0 {
		// Before 2.10 there is no init_size: allow for in-place decompression.
		h.InitSize = uint32(min(4*(size-uint64(h.KernelOffset)), 1<<31))
	}
	return h, nil
}

// loadAddress picks where the protected-mode kernel goes: pref_address when
// the kernel is relocatable and fits there, else 1 MiB.
func (h setupHeader) loadAddress(memEnd uint64) uint64 {
	if h.Relocatable && h.PrefAddress >= highMemAddr && h.PrefAddress < memEnd &&
		uint64(h.InitSize) <= memEnd-h.PrefAddress &&
		(h.KernelAlignment == 0 || h.PrefAddress%uint64(h.KernelAlignment) == 0) {
		return h.PrefAddress
	}
	return highMemAddr
}
