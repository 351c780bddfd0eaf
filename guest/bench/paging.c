/* Reaching MMIO above 4 GiB. Both entries identity-map the low 4 GiB
 * (tinyvmm: RAM and the 3-4 GiB MMIO window as user pages; pvh.S: 2 MiB
 * pages). A 64-bit BAR that firmware put higher gets 2 MiB pages added at
 * CPL0; at CPL3 the guest cannot touch page tables and says so. */
#include "bench.h"

#define PTE_PRESENT 0x1
#define PTE_WRITE 0x2
#define PTE_HUGE 0x80
#define PAGE_2M (2ul << 20)
#define SPARE_TABLES 8

int running_at_cpl0;

extern u64 pvh_pml4[512]; /* pvh.S */
static u64 spare[SPARE_TABLES][512] __attribute__((section(".boot"), aligned(4096)));
static int spare_used;

static u64 *table_at(u64 *parent, int idx)
{
	if (!(parent[idx] & PTE_PRESENT)) {
		if (spare_used == SPARE_TABLES)
			return NULL;
		u64 *t = spare[spare_used++];
		parent[idx] = (u64)t | PTE_PRESENT | PTE_WRITE;
	}
	return (u64 *)(parent[idx] & ~0xffful);
}

int paging_map_identity(u64 addr, u64 len)
{
	if (addr + len <= (4ul << 30))
		return 0;
	if (!running_at_cpl0)
		return -1;
	for (u64 a = addr & ~(PAGE_2M - 1); a < addr + len; a += PAGE_2M) {
		u64 *pdpt = table_at(pvh_pml4, (int)((a >> 39) & 511));
		u64 *pd = pdpt ? table_at(pdpt, (int)((a >> 30) & 511)) : NULL;
		if (!pd)
			return -1;
		pd[(a >> 21) & 511] = a | PTE_PRESENT | PTE_WRITE | PTE_HUGE;
	}
	u64 cr3;
	__asm__ volatile("mov %%cr3, %0; mov %0, %%cr3" : "=r"(cr3) : : "memory");
	return 0;
}
