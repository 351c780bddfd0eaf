/* cpl3=1 on a PVH boot: drop to CPL3 and come in again through the
 * user-mode start (entry.S), the way tinyvmm starts the guest: long mode,
 * IOPL 3, IF 0, every page a user page. It lets QEMU test the path that
 * tinyvmm runs natively under PVM. An exception there lands in
 * user_fault, which reports it: under tinyvmm it would mean CPL0 code. */
#include "bench.h"

#define SEL_USER_DATA 0x18
#define SEL_USER_CODE 0x20
#define SEL_TSS 0x28
#define RFLAGS_IOPL3 0x3002 /* IOPL 3, IF 0, the reserved bit 1 */
#define FAULT_VECTORS 32

struct tss {
	u32 reserved0;
	u64 rsp0, rsp1, rsp2;
	u64 reserved1, ist[7], reserved2;
	u16 reserved3, iomap_base;
} __attribute__((packed));

/* In .boot, not .bss: the user-mode start zeroes .bss while these live. */
static u64 gdt[7] __attribute__((section(".boot"), aligned(16)));
static struct tss tss __attribute__((section(".boot"), aligned(16)));
static struct idt_gate idt[FAULT_VECTORS] __attribute__((section(".boot"), aligned(16)));
static u8 fault_stack[8192] __attribute__((section(".boot"), aligned(16)));

extern const u64 fault_stubs[FAULT_VECTORS]; /* usermode.S */
extern char _start[], stack_top[];
void user_iret(u64 rip, u64 rsp, u64 arg, u64 rflags) __attribute__((noreturn));

void user_fault(u64 vector, u64 error, u64 rip)
{
	serial_puts(running_at_cpl0 ? "BENCH error msg=\"exception at CPL0 (irq=1)\""
				    : "BENCH error msg=\"exception at CPL3 (tinyvmm would leave native mode)\"");
	serial_kv("vector", vector);
	serial_kv_hex("error", error);
	serial_kv_hex("rip", rip);
	serial_puts("\n");
	bench_exit(EXIT_CPL3_FAULT);
}

void enter_user_mode(const char *cmdline)
{
	u64 tss_base = (u64)&tss, tss_limit = sizeof(tss) - 1;
	gdt[0] = 0;
	gdt[1] = 0x00af9a000000ffff; /* kernel code, 64-bit */
	gdt[2] = 0x00cf92000000ffff; /* kernel data */
	gdt[3] = 0x00cff2000000ffff; /* user data, DPL 3 */
	gdt[4] = 0x00affa000000ffff; /* user code, 64-bit, DPL 3 */
	gdt[5] = (tss_limit & 0xffff) | (tss_base & 0xffffff) << 16 | 0x89ul << 40 |
		 ((tss_limit >> 16) & 0xf) << 48 | ((tss_base >> 24) & 0xff) << 56;
	gdt[6] = tss_base >> 32;
	tss.rsp0 = (u64)(fault_stack + sizeof(fault_stack));
	tss.iomap_base = sizeof(tss); /* no I/O bitmap: IOPL 3 decides */
	for (int v = 0; v < FAULT_VECTORS; v++)
		idt[v] = idt_gate(fault_stubs[v]);
	struct table_desc g = {sizeof(gdt) - 1, (u64)gdt}, i = {sizeof(idt) - 1, (u64)idt};
	__asm__ volatile("lgdt %0; lidt %1; ltr %w2" : : "m"(g), "m"(i), "r"(SEL_TSS) : "memory");
	user_iret((u64)_start, (u64)stack_top, (u64)cmdline, RFLAGS_IOPL3);
}
