/* The PVH entry, for QEMU -kernel (and any PVH loader): the ELF note below
 * names pvh_start32, which the loader enters in 32-bit protected mode,
 * paging off, with EBX = physical address of struct hvm_start_info. This
 * prologue identity-maps the low 4 GiB with 2 MiB pages, enters long mode
 * at CPL0 and calls pvh_main. Interrupts stay off; there is no IDT. */
#define XEN_ELFNOTE_PHYS32_ENTRY 18
#define MSR_EFER 0xc0000080
#define EFER_LME 0x100
#define CR4_PAE 0x20
#define CR0_PG_PE 0x80000001
/* User pages too, so that cpl3=1 (usermode.c) can run the user-mode start
 * on these tables; CPL0 is unaffected without SMEP/SMAP. */
#define PTE_TABLE 0x7  /* present, writable, user */
#define PTE_2M 0x87    /* present, writable, user, huge */

	.section .note.Xen, "a", @note
	.balign 4
	.long 4                         /* namesz */
	.long 8                         /* descsz */
	.long XEN_ELFNOTE_PHYS32_ENTRY  /* type */
	.asciz "Xen"
	.balign 4
	.quad pvh_start32

	.section .text.pvh, "ax"
	.code32
	.globl pvh_start32
pvh_start32:
	cli
	cld
	mov %ebx, %esi

	/* Zero .bss and .boot: stack and page tables live there. */
	mov $__bss_start, %edi
	mov $__boot_end, %ecx
	sub %edi, %ecx
	xor %eax, %eax
	rep stosb

	/* 2048 PD entries cover 0..4 GiB in 2 MiB pages. */
	xor %ecx, %ecx
1:	mov %ecx, %eax
	shl $21, %eax
	or $PTE_2M, %eax
	mov %eax, pvh_pd(,%ecx,8)
	inc %ecx
	cmp $2048, %ecx
	jb 1b
	/* Four PDPT entries, one per PD page; one PML4 entry. */
	xor %ecx, %ecx
2:	mov %ecx, %eax
	shl $12, %eax
	add $pvh_pd, %eax
	or $PTE_TABLE, %eax
	mov %eax, pvh_pdpt(,%ecx,8)
	inc %ecx
	cmp $4, %ecx
	jb 2b
	mov $pvh_pdpt, %eax
	or $PTE_TABLE, %eax
	mov %eax, pvh_pml4

	mov %cr4, %eax
	or $CR4_PAE, %eax
	mov %eax, %cr4
	mov $pvh_pml4, %eax
	mov %eax, %cr3
	mov $MSR_EFER, %ecx
	rdmsr
	or $EFER_LME, %eax
	wrmsr
	lgdt pvh_gdt_desc
	mov %cr0, %eax
	or $CR0_PG_PE, %eax
	mov %eax, %cr0
	ljmp $0x08, $pvh_start64

	.code64
pvh_start64:
	mov $0x10, %eax
	mov %eax, %ds
	mov %eax, %es
	mov %eax, %ss
	mov %eax, %fs
	mov %eax, %gs
	lea stack_top(%rip), %rsp
	mov %esi, %edi /* zero-extends: &hvm_start_info */
	call pvh_main
3:	cli
	hlt
	jmp 3b

	.section .rodata
	.balign 8
pvh_gdt:
	.quad 0
	.quad 0x00af9a000000ffff /* 0x08: 64-bit code, DPL 0 */
	.quad 0x00cf92000000ffff /* 0x10: data */
pvh_gdt_end:
pvh_gdt_desc:
	.word pvh_gdt_end - pvh_gdt - 1
	.long pvh_gdt

	/* .boot, not .bss: the user-mode start (cpl3=1) zeroes .bss. */
	.section .boot, "aw", @nobits
	.balign 4096
	.globl pvh_pml4
pvh_pml4:
	.skip 4096
pvh_pdpt:
	.skip 4096
pvh_pd:
	.skip 4 * 4096

	.section .note.GNU-stack, "", @progbits
