/* The user-mode start: tinyvmm starts the vCPU here at CPL3 in long mode,
 * IOPL 3, IF 0, all RAM and the 3-4 GiB MMIO window identity-mapped as user
 * pages, and RDI pointing at the command line. Nothing here may fault: one
 * exception would move the vCPU to CPL0 (and, under PVM, into the emulator
 * for good). */
#define CMDLINE_MAX 512

	.section .text
	.globl _start
_start:
	cld
	/* Copy the command line into .data first: it may lie anywhere,
	 * even in what is about to be zeroed. */
	lea cmdline_buf(%rip), %rdx
	mov $CMDLINE_MAX - 1, %ecx
	test %rdi, %rdi
	jz 2f
1:	movb (%rdi), %al
	test %al, %al
	jz 2f
	movb %al, (%rdx)
	inc %rdi
	inc %rdx
	dec %ecx
	jnz 1b
2:	movb $0, (%rdx)

	/* Zero .bss (the stack lives there, so before using it). */
	lea __bss_start(%rip), %rdi
	lea __bss_end(%rip), %rcx
	sub %rdi, %rcx
	xor %eax, %eax
	rep stosb

	lea stack_top(%rip), %rsp
	lea cmdline_buf(%rip), %rdi
	xor %esi, %esi /* at_cpl0 = 0 */
	call bench_main
3:	pause
	jmp 3b

	.section .bss
	.balign 16
	.globl stack_top
stack_bottom:
	.skip 65536
stack_top:

	.section .note.GNU-stack, "", @progbits
