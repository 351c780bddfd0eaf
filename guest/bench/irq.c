/* irq=1: the rx queue signals through MSI-X and the guest halts when its
 * ring is empty, as a guest kernel's NAPI does (interrupts on, check the
 * ring once more, halt; off while it drains). Only at CPL0, so only after
 * a PVH boot: an IDT, the local APIC in xAPIC mode, MSI-X entry 0 for the
 * rx queue, and a 100 ms periodic APIC timer so that a halted guest still
 * sees its time limits when no frame comes. */
#include "bench.h"

#define MSR_APIC_BASE 0x1b
#define APIC_BASE_ENABLE (1u << 11)
#define APIC_TPR 0x80
#define APIC_EOI 0xb0
#define APIC_SVR 0xf0
#define APIC_LVT_TIMER 0x320
#define APIC_TIMER_INIT 0x380
#define APIC_TIMER_CUR 0x390
#define APIC_TIMER_DIV 0x3e0
#define APIC_SVR_ENABLE 0x100
#define LVT_MASKED (1u << 16)
#define LVT_PERIODIC (1u << 17)
#define TIMER_DIV_1 0xb
#define TIMER_PERIOD_MS 100
#define VECTOR_SPURIOUS 0xff

#define PCI_CAP_MSIX 0x11
#define MSIX_ENABLE 0x8000
#define MSIX_FUNCTION_MASK 0x4000
#define MSI_ADDRESS 0xfee00000u /* destination APIC 0, physical mode */

static struct idt_gate idt[256] __attribute__((aligned(16)));
volatile u64 irq_rx_count, irq_timer_count;
volatile u32 *lapic_eoi; /* irq.S writes 0 here to end each interrupt */
static volatile u8 *lapic;

extern const u64 fault_stubs[32]; /* usermode.S: report and exit */
extern char irq_rx_entry[], irq_timer_entry[], irq_spurious_entry[];

static u64 rdmsr(u32 msr)
{
	u32 lo, hi;
	__asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
	return ((u64)hi << 32) | lo;
}

static void apic_w(u32 reg, u32 v) { mmio_w32(lapic + reg, v); }
static u32 apic_r(u32 reg) { return mmio_r32(lapic + reg); }

void irq_setup(u64 tsc_khz)
{
	if (!running_at_cpl0)
		bench_fail(EXIT_BAD_ARGS, "irq=1 takes interrupts at CPL0: boot through PVH (tinyvmm run --kernel bench.elf without --bench-guest)");
	for (int v = 0; v < 32; v++)
		idt[v] = idt_gate(fault_stubs[v]);
	for (int v = 32; v < 256; v++)
		idt[v] = idt_gate((u64)irq_spurious_entry);
	idt[IRQ_VECTOR_RX] = idt_gate((u64)irq_rx_entry);
	idt[IRQ_VECTOR_TIMER] = idt_gate((u64)irq_timer_entry);
	struct table_desc d = {sizeof(idt) - 1, (u64)idt};
	__asm__ volatile("lidt %0" : : "m"(d) : "memory");

	u64 base = rdmsr(MSR_APIC_BASE);
	if (!(base & APIC_BASE_ENABLE))
		bench_fail(EXIT_DEVICE_FAILED, "irq=1: the local APIC is disabled");
	lapic = (volatile u8 *)(base & ~0xffful & 0xffffffffffull);
	lapic_eoi = (volatile u32 *)(lapic + APIC_EOI);
	apic_w(APIC_TPR, 0);
	apic_w(APIC_SVR, APIC_SVR_ENABLE | VECTOR_SPURIOUS);

	/* The APIC timer's rate, against the TSC over 10 ms (KVM's is 1 GHz). */
	apic_w(APIC_TIMER_DIV, TIMER_DIV_1);
	apic_w(APIC_LVT_TIMER, LVT_MASKED | IRQ_VECTOR_TIMER);
	apic_w(APIC_TIMER_INIT, 0xffffffffu);
	u64 t0 = rdtsc();
	while (rdtsc() - t0 < 10 * tsc_khz)
		cpu_relax();
	u64 ticks = 0xffffffffu - apic_r(APIC_TIMER_CUR);
	u64 period = ticks * (TIMER_PERIOD_MS / 10);
	if (!ticks || period > 0xffffffffu)
		bench_fail(EXIT_DEVICE_FAILED, "irq=1: the APIC timer does not count at a usable rate");
	apic_w(APIC_LVT_TIMER, LVT_PERIODIC | IRQ_VECTOR_TIMER);
	apic_w(APIC_TIMER_INIT, (u32)period);
}

void irq_stop(void)
{
	apic_w(APIC_LVT_TIMER, LVT_MASKED | IRQ_VECTOR_TIMER);
	apic_w(APIC_TIMER_INIT, 0);
}

int msix_setup(const struct pci_dev *d)
{
	u8 cap = pci_find_cap(d, PCI_CAP_MSIX);
	if (!cap)
		return -1;
	u32 table = pci_read32(d, (u16)(cap + 4));
	u64 bar = pci_bar_address(d, (int)(table & 7));
	if (!bar)
		return -1;
	volatile u8 *entry = (volatile u8 *)(bar + (table & ~7u));
	if (paging_map_identity((u64)entry, 16) < 0)
		return -1;
	u16 ctrl = pci_read16(d, (u16)(cap + 2));
	pci_write16(d, (u16)(cap + 2), (u16)((ctrl | MSIX_ENABLE | MSIX_FUNCTION_MASK)));
	mmio_w32(entry + 0, MSI_ADDRESS);
	mmio_w32(entry + 4, 0);
	mmio_w32(entry + 8, IRQ_VECTOR_RX); /* fixed delivery, edge */
	mmio_w32(entry + 12, 0);            /* unmasked */
	pci_write16(d, (u16)(cap + 2), (u16)((ctrl | MSIX_ENABLE) & ~MSIX_FUNCTION_MASK));
	return 0;
}

void irq_wait(void)
{
	/* sti's one-instruction shadow: an interrupt already pending wakes
	 * the hlt instead of slipping in before it. */
	__asm__ volatile("sti; hlt; cli" : : : "memory");
}
