/* The CPL0 side of cpl3=1 (usermode.c): the iretq into the user-mode
 * start, and one stub per exception vector that reports the fault. */
#define SEL_USER_DATA 0x18
#define SEL_USER_CODE 0x20

	.text
/* void user_iret(u64 rip, u64 rsp, u64 arg, u64 rflags) */
	.globl user_iret
user_iret:
	xor %eax, %eax
	mov %eax, %ds
	mov %eax, %es
	pushq $(SEL_USER_DATA | 3)
	pushq %rsi
	pushq %rcx
	pushq $(SEL_USER_CODE | 3)
	pushq %rdi
	mov %rdx, %rdi
	iretq

/* Vectors that push an error code; the others get a 0 pushed. */
.macro stub v
fault_stub_\v:
	.if (\v == 8) || (\v >= 10 && \v <= 14) || (\v == 17) || (\v == 21) || (\v == 29) || (\v == 30)
	.else
	pushq $0
	.endif
	mov $\v, %edi
	jmp fault_common
.endm

.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
	stub \v
.endr

fault_common:
	mov (%rsp), %rsi     /* error code */
	mov 8(%rsp), %rdx    /* the faulting rip */
	and $-16, %rsp
	call user_fault
1:	cli
	hlt
	jmp 1b

	.section .rodata
	.balign 8
	.globl fault_stubs
fault_stubs:
.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
	.quad fault_stub_\v
.endr

	.section .note.GNU-stack, "", @progbits
