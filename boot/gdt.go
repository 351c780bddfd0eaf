package boot

import "encoding/binary"

// Selectors of the GDT that Load and LoadUser write. 0x10 and 0x18 are the
// boot protocol's __BOOT_CS and __BOOT_DS.
const (
	selCode32   = 0x08
	selCode64   = 0x10
	selData     = 0x18
	selTSS      = 0x20 // a 16-byte system descriptor in long mode
	selUserData = 0x30 | 3
	selUserCode = 0x38 | 3
	gdtEntries  = 8
)

const (
	typeCodeExecReadAccessed = 0xb
	typeDataReadWriteAcc     = 0x3
	typeTSSBusy              = 0xb
	typeLDT                  = 0x2
)

// flat returns a present 4 GiB code or data segment.
func flat(sel uint16, typ, dpl uint8, long bool) Segment {
	s := Segment{Limit: 0xffffffff, Selector: sel, Type: typ, Present: 1, DPL: dpl, S: 1, G: 1}
	if long {
		s.L = 1 // L and DB are exclusive in a 64-bit code segment
	} else {
		s.DB = 1
	}
	return s
}

var (
	segCode32   = flat(selCode32, typeCodeExecReadAccessed, 0, false)
	segCode64   = flat(selCode64, typeCodeExecReadAccessed, 0, true)
	segData     = flat(selData, typeDataReadWriteAcc, 0, false)
	segUserData = flat(selUserData, typeDataReadWriteAcc, 3, false)
	segUserCode = flat(selUserCode, typeCodeExecReadAccessed, 3, true)
	// segLDT is not present, which KVM takes as "unusable".
	segLDT = Segment{Type: typeLDT}
)

// tssMinLimit is the limit of a 64-bit TSS with no I/O bitmap.
const tssMinLimit = 0x67

// tssSegment is a busy TSS at base with the given limit.
func tssSegment(base uint64, limit uint32) Segment {
	return Segment{Base: base, Limit: limit, Selector: selTSS, Type: typeTSSBusy, Present: 1}
}

// descriptor encodes s as an 8-byte GDT entry (the low half for system
// segments, whose upper base bits go in the next entry).
func descriptor(s Segment) uint64 {
	limit := uint64(s.Limit)
	if s.G != 0 {
		limit >>= 12
	}
	access := uint64(s.Present&1)<<7 | uint64(s.DPL&3)<<5 | uint64(s.S&1)<<4 | uint64(s.Type&0xf)
	flags := uint64(s.G&1)<<3 | uint64(s.DB&1)<<2 | uint64(s.L&1)<<1 | uint64(s.AVL&1)
	return limit&0xffff | (s.Base&0xffffff)<<16 | access<<40 |
		(limit>>16&0xf)<<48 | flags<<52 | (s.Base>>24&0xff)<<56
}

// writeGDT writes the GDT with the descriptor of tss and returns its limit.
func writeGDT(mem []byte, tss Segment) uint16 {
	entries := [gdtEntries]uint64{
		selCode32 / 8:          descriptor(segCode32),
		selCode64 / 8:          descriptor(segCode64),
		selData / 8:            descriptor(segData),
		selTSS / 8:             descriptor(tss),
		selTSS/8 + 1:           tss.Base >> 32,
		(selUserData &^ 7) / 8: descriptor(segUserData),
		(selUserCode &^ 7) / 8: descriptor(segUserCode),
	}
	for i, e := range entries {
		binary.LittleEndian.PutUint64(mem[gdtAddr+8*i:], e)
	}
	return gdtEntries*8 - 1
}
