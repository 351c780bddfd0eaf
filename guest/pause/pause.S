/*
 * The /init of the kernel-only guest: a loop that makes no system calls.
 * Under PVM, guest user space cannot make system calls (see PVM.md), so the
 * kernel-only test boots this and checks that the kernel answers ping.
 */
	.text
	.globl	_start
_start:
1:	pause
	jmp	1b

	.section .note.GNU-stack, "", @progbits
