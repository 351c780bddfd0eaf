/* PCI configuration space through ports 0xCF8/0xCFC (each access is an exit
 * to the VMM), device lookup on bus 0, and memory BAR assignment for the
 * boots that have no firmware (tinyvmm assigns BARs, PVH direct boot may
 * not). */
#include "bench.h"

#define CFG_ADDR 0xcf8
#define CFG_DATA 0xcfc
#define PCI_COMMAND 0x04
#define PCI_STATUS 0x06
#define PCI_STATUS_CAPS 0x10
#define PCI_CAP_PTR 0x34
#define PCI_CMD_MEMORY 0x2
#define PCI_CMD_MASTER 0x4
#define PCI_HEADER_TYPE 0x0e
#define PCI_BAR0 0x10
#define BAR_IO 0x1
#define BAR_TYPE_64 0x4
#define WINDOW_START 0xc0000000ul
#define WINDOW_END 0xfec00000ul
#define FIRMWARE_BAR_SLACK (16ul << 20)

static void select_reg(const struct pci_dev *d, u16 off)
{
	outl(CFG_ADDR, 0x80000000u | (u32)d->bus << 16 | (u32)d->dev << 11 | (u32)d->fn << 8 | (off & 0xfc));
}

u8 pci_read8(const struct pci_dev *d, u16 off)
{
	select_reg(d, off);
	return inb((u16)(CFG_DATA + (off & 3)));
}

u16 pci_read16(const struct pci_dev *d, u16 off)
{
	select_reg(d, off);
	return inw((u16)(CFG_DATA + (off & 2)));
}

u32 pci_read32(const struct pci_dev *d, u16 off)
{
	select_reg(d, off);
	return inl(CFG_DATA);
}

void pci_write16(const struct pci_dev *d, u16 off, u16 v)
{
	select_reg(d, off);
	outw((u16)(CFG_DATA + (off & 2)), v);
}

void pci_write32(const struct pci_dev *d, u16 off, u32 v)
{
	select_reg(d, off);
	outl(CFG_DATA, v);
}

/* list_functions finds every function on bus 0 (at most max). */
static int list_functions(struct pci_dev *out, int max)
{
	int n = 0;
	for (u8 dev = 0; dev < 32; dev++) {
		for (u8 fn = 0; fn < 8 && n < max; fn++) {
			struct pci_dev d = {0, dev, fn};
			if ((pci_read32(&d, 0) & 0xffff) == 0xffff) {
				if (fn == 0)
					break;
				continue;
			}
			out[n++] = d;
			if (fn == 0 && !(pci_read8(&d, PCI_HEADER_TYPE) & 0x80))
				break; /* single-function device */
		}
	}
	return n;
}

#define MAX_FUNCTIONS 64
static struct pci_dev functions[MAX_FUNCTIONS];
static int nfunctions = -1;

int pci_find(u16 vendor, const u16 *devices, int ndevices, struct pci_dev *out)
{
	if (nfunctions < 0)
		nfunctions = list_functions(functions, MAX_FUNCTIONS);
	for (int f = 0; f < nfunctions; f++) {
		u32 id = pci_read32(&functions[f], 0);
		for (int i = 0; i < ndevices; i++) {
			if ((id & 0xffff) == vendor && (id >> 16) == devices[i]) {
				*out = functions[f];
				return 1;
			}
		}
	}
	return 0;
}

static u64 read_bar(const struct pci_dev *d, int bar, u32 *low)
{
	*low = pci_read32(d, (u16)(PCI_BAR0 + 4 * bar));
	u64 addr = *low & ~0xful;
	if ((*low & BAR_TYPE_64) && bar < 5)
		addr |= (u64)pci_read32(d, (u16)(PCI_BAR0 + 4 * (bar + 1))) << 32;
	return addr;
}

/* window_base finds the lowest size-aligned place in the window that
 * keeps clear of every memory BAR already there. Their sizes are not
 * probed (sizing rewrites a live BAR), so each counts as FIRMWARE_BAR_SLACK. */
static u64 window_base(u64 size)
{
	u64 taken[MAX_FUNCTIONS * 6];
	int ntaken = 0;
	for (int f = 0; f < nfunctions; f++) {
		for (int bar = 0; bar < 6; bar++) {
			u32 low;
			u64 a = read_bar(&functions[f], bar, &low);
			if (!(low & BAR_IO) && a >= WINDOW_START && a < WINDOW_END)
				taken[ntaken++] = a;
			if (!(low & BAR_IO) && (low & BAR_TYPE_64))
				bar++;
		}
	}
	u64 base = (WINDOW_START + size - 1) & ~(size - 1);
	/* Each pass moves past one taken range, so ntaken + 1 passes suffice. */
	for (int pass = 0; pass <= ntaken; pass++) {
		int moved = 0;
		for (int i = 0; i < ntaken; i++) {
			if (base < taken[i] + FIRMWARE_BAR_SLACK && taken[i] < base + size) {
				base = (taken[i] + FIRMWARE_BAR_SLACK + size - 1) & ~(size - 1);
				moved = 1;
			}
		}
		if (!moved)
			break;
	}
	return base + size <= WINDOW_END ? base : 0;
}

static u64 assign_bar(const struct pci_dev *d, int bar, u32 low)
{
	u16 reg = (u16)(PCI_BAR0 + 4 * bar);
	u16 cmd = pci_read16(d, PCI_COMMAND);
	pci_write16(d, PCI_COMMAND, (u16)(cmd & ~PCI_CMD_MEMORY));
	pci_write32(d, reg, 0xffffffffu);
	u32 mask = pci_read32(d, reg) & ~0xfu;
	pci_write32(d, reg, low);
	pci_write16(d, PCI_COMMAND, cmd);
	if (!mask)
		return 0;
	u64 size = (u64)(~mask) + 1;
	u64 base = window_base(size);
	if (!base)
		return 0;
	pci_write32(d, reg, (u32)base | (low & 0xf));
	if (low & BAR_TYPE_64)
		pci_write32(d, (u16)(reg + 4), 0);
	return base;
}

u64 pci_bar_address(const struct pci_dev *d, int bar)
{
	if (bar < 0 || bar > 5)
		return 0;
	u32 low;
	u64 addr = read_bar(d, bar, &low);
	if (low & BAR_IO)
		return 0;
	if (!addr) {
		addr = assign_bar(d, bar, low);
		if (addr) {
			serial_puts("BENCH note assigned");
			serial_kv("bar", (u64)bar);
			serial_kv_hex("addr", addr);
			serial_puts("\n");
		}
	}
	return addr;
}

void pci_forget_bars(const struct pci_dev *d)
{
	u16 cmd = pci_read16(d, PCI_COMMAND);
	pci_write16(d, PCI_COMMAND, (u16)(cmd & ~(PCI_CMD_MEMORY | PCI_CMD_MASTER)));
	for (int bar = 0; bar < 6; bar++) {
		u32 low = pci_read32(d, (u16)(PCI_BAR0 + 4 * bar));
		if (!(low & BAR_IO))
			pci_write32(d, (u16)(PCI_BAR0 + 4 * bar), low & 0xf);
	}
}

u8 pci_find_cap(const struct pci_dev *d, u8 id)
{
	if (!(pci_read16(d, PCI_STATUS) & PCI_STATUS_CAPS))
		return 0;
	u8 cap = pci_read8(d, PCI_CAP_PTR) & 0xfc;
	for (int n = 0; cap && n < 48; n++) { /* bounded: a looping list */
		if (pci_read8(d, cap) == id)
			return cap;
		cap = pci_read8(d, (u16)(cap + 1)) & 0xfc;
	}
	return 0;
}

void pci_enable_memory_and_dma(const struct pci_dev *d)
{
	u16 cmd = pci_read16(d, PCI_COMMAND);
	pci_write16(d, PCI_COMMAND, (u16)(cmd | PCI_CMD_MEMORY | PCI_CMD_MASTER));
}
