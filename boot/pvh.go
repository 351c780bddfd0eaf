package boot

import "encoding/binary"

// PVH boot (xen/include/public/arch-x86/hvm/start_info.h): the kernel's
// 32-bit entry gets an hvm_start_info in EBX.
const (
	pvhMagic      = 0x336ec578
	pvhVersion    = 1
	pvhInfoLen    = 56
	pvhModLen     = 32
	pvhMemmapLen  = 24
	pvhMemmapMax  = (zeroPageAddr - memmapAddr) / pvhMemmapLen
	pvhOffMods    = 12
	pvhOffModlist = 16
	pvhOffCmdline = 24
	pvhOffRSDP    = 32
	pvhOffMemmap  = 40
	pvhOffMemmapN = 48
)

// writeStartInfo writes hvm_start_info at startInfoAddr, the initrd as its
// first module, and the memory map.
func writeStartInfo(mem []byte, cmdline, initrd, initrdSize uint64, e820 []e820Entry) {
	le := binary.LittleEndian
	clear(mem[startInfoAddr:zeroPageAddr])
	si := mem[startInfoAddr:]
	le.PutUint32(si[0:], pvhMagic)
	le.PutUint32(si[4:], pvhVersion)
	le.PutUint64(si[pvhOffCmdline:], cmdline)
	le.PutUint64(si[pvhOffRSDP:], 0) // no ACPI: Linux falls back to the MP table
	if initrdSize > 0 {
		le.PutUint32(si[pvhOffMods:], 1)
		le.PutUint64(si[pvhOffModlist:], modlistAddr)
		mod := mem[modlistAddr:]
		le.PutUint64(mod[0:], initrd)
		le.PutUint64(mod[8:], initrdSize)
	}
	n := min(len(e820), pvhMemmapMax)
	le.PutUint64(si[pvhOffMemmap:], memmapAddr)
	le.PutUint32(si[pvhOffMemmapN:], uint32(n))
	for i, e := range e820[:n] {
		o := mem[memmapAddr+i*pvhMemmapLen:]
		le.PutUint64(o[0:], e.Addr)
		le.PutUint64(o[8:], e.Size)
		le.PutUint32(o[16:], e.Type)
	}
}
