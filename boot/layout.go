package boot

// Guest physical memory map used by Load and LoadUser. Everything below
// 1 MiB is ours; the kernel goes at 1 MiB and up, the initrd as high as
// allowed.
//
//	0x0000_0500  GDT (null, 32-bit code 0x08, 64-bit code 0x10, data 0x18,
//	             TSS 0x20, user data 0x33, user code 0x3b)
//	0x0000_1000  IDT, 256 gates (LoadUser only)
//	0x0000_3000  exception stubs, 16 bytes a vector (LoadUser only)
//	0x0000_5000  ring-0 stack for exceptions, grows down to 0x4000 (LoadUser only)
//	0x0000_6000  PVH hvm_start_info, its module list at +0x40, memory map at +0x80
//	0x0000_7000  boot_params (the zero page)
//	0x0000_8ff0  initial stack pointer (the kernels set their own at once)
//	0x0000_9000  PML4, then the PDPT at 0xa000, then 2 MiB-page PDs from
//	             0xb000 (4 for the first 4 GiB, more for LoadUser's high RAM)
//	0x0002_0000  kernel command line / LoadUser's argument string (< 64 KiB)
//	0x0003_0000  user stack up to 0x80000, where RSP starts (LoadUser only)
//	0x0008_0000  TSS and its 8 KiB I/O bitmap, to 0x82069 (LoadUser only)
//	0x0009_fc00  EBDA and BIOS area up to 1 MiB: reserved in the e820 map
//	0x000f_0000  MP floating pointer, MP configuration table right after it
//	0x0010_0000  bzImage protected-mode kernel (or pref_address when
//	             relocatable and it fits); ELF segments at their p_paddr
//	top of Low   initrd, page aligned, below initrd_addr_max
const (
	gdtAddr       = 0x500
	idtAddr       = 0x1000
	stubsAddr     = 0x3000
	stubLen       = 16
	ring0StackTop = 0x5000
	startInfoAddr = 0x6000
	modlistAddr   = startInfoAddr + 0x40
	memmapAddr    = startInfoAddr + 0x80
	zeroPageAddr  = 0x7000
	bootStackTop  = 0x8ff0
	pml4Addr      = 0x9000
	pdptAddr      = 0xa000
	pdAddr        = 0xb000
	pdEnd         = 0x20000 // PDs must end below the command line
	cmdlineAddr   = 0x20000
	cmdlineMax    = 0x10000
	userStackTop  = 0x80000
	tssAddr       = 0x80000 // the stack grows down from here
	ebdaAddr      = 0x9fc00
	mpTableAddr   = 0xf0000
	highMemAddr   = 0x100000 // 1 MiB: kernels and ELF segments start here or above

	pageSize = 0x1000
	mib      = 1 << 20
	gib      = 1 << 30

	// lowMemLimit is where RAM below the PCI hole ends; RAM above it
	// continues at highRAMBase.
	lowMemLimit = 3 * gib
	highRAMBase = 4 * gib
)
