#include "textflag.h"

// func outInstr(port uint16, value byte)
TEXT ·outInstr(SB), NOSPLIT, $0-3
	MOVW port+0(FP), DX
	MOVB value+2(FP), AX
	OUTB
	RET
