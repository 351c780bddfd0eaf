#include "textflag.h"

// func load16(p *uint16) uint16
// An aligned 16-bit load is atomic on x86.
TEXT ·load16(SB), NOSPLIT, $0-10
	MOVQ p+0(FP), AX
	MOVW (AX), BX
	MOVW BX, ret+8(FP)
	RET

// func store16(p *uint16, v uint16)
// XCHG with memory is locked: atomic and a full barrier, like the CAS of
// the 32-bit path.
TEXT ·store16(SB), NOSPLIT, $0-10
	MOVQ p+0(FP), AX
	MOVW v+8(FP), BX
	XCHGW BX, (AX)
	RET
