/* irq=1's interrupt entries (irq.c): count, end the interrupt at the local
 * APIC, return. Interrupts are on only across the halt in irq_wait, so
 * they come in at CPL0 on the guest's one stack. */
	.text
	.globl irq_rx_entry, irq_timer_entry, irq_spurious_entry
irq_rx_entry:
	incq irq_rx_count(%rip)
	jmp 1f
irq_timer_entry:
	incq irq_timer_count(%rip)
1:	push %rax
	mov lapic_eoi(%rip), %rax
	movl $0, (%rax)
	pop %rax
	iretq
/* The APIC's spurious vector takes no EOI. */
irq_spurious_entry:
	iretq

	.section .note.GNU-stack, "", @progbits
