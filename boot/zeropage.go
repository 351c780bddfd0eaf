package boot

import "encoding/binary"

// boot_params ("the zero page") offsets outside the setup header.
const (
	zpExtRamdiskImage = 0x0c0
	zpExtRamdiskSize  = 0x0c4
	zpExtCmdLinePtr   = 0x0c8
	zpE820Entries     = 0x1e8
	zpE820Table       = 0x2d0
	zpE820Max         = 128
	zpSize            = 0x1000
	e820EntryLen      = 20
)

// bootParams is what the 64-bit entry gets in RSI.
type bootParams struct {
	header     []byte // the image's setup header (file bytes 0x1f1 up to its end), nil for an ELF
	cmdline    uint64
	initrd     uint64
	initrdSize uint64
	e820       []e820Entry
}

// writeZeroPage writes boot_params at zeroPageAddr: the setup header as the
// image carries it (or a minimal one for an ELF kernel), then what a boot
// loader fills in.
func writeZeroPage(mem []byte, p bootParams) {
	zp := mem[zeroPageAddr : zeroPageAddr+zpSize]
	clear(zp)
	le := binary.LittleEndian
	if p.header != nil {
		copy(zp[hdrStart:], p.header)
	} else {
		le.PutUint16(zp[hdrBootFlag:], bootFlagValue)
		le.PutUint32(zp[hdrMagic:], hdrMagicValue)
		le.PutUint16(zp[hdrVersion:], 0x20f)
		zp[hdrLoadflags] = loadedHigh
		le.PutUint32(zp[hdrInitrdAddrMax:], elfInitrdAddrMax)
		le.PutUint32(zp[hdrKernelAlign:], 2*mib)
		le.PutUint32(zp[hdrCmdlineSize:], elfCmdlineMax)
	}
	zp[hdrTypeOfLoader] = typeOfLoaderOther
	le.PutUint32(zp[hdrCmdLinePtr:], uint32(p.cmdline))
	le.PutUint32(zp[zpExtCmdLinePtr:], uint32(p.cmdline>>32))
	le.PutUint32(zp[hdrRamdiskImage:], uint32(p.initrd))
	le.PutUint32(zp[zpExtRamdiskImage:], uint32(p.initrd>>32))
	le.PutUint32(zp[hdrRamdiskSize:], uint32(p.initrdSize))
	le.PutUint32(zp[zpExtRamdiskSize:], uint32(p.initrdSize>>32))
	n := min(len(p.e820), zpE820Max)
	zp[zpE820Entries] = uint8(n)
	for i, e := range p.e820[:n] {
		o := zp[zpE820Table+i*e820EntryLen:]
		le.PutUint64(o[0:], e.Addr)
		le.PutUint64(o[8:], e.Size)
		le.PutUint32(o[16:], e.Type)
	}
}
