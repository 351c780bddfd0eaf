package kvm

// Go mirrors of the x86-64 KVM ABI structs (<linux/kvm.h>, <asm/kvm.h>).
// Field order, widths and padding match the kernel exactly; abi_test.go
// asserts every size.

// Regs is struct kvm_regs.
type Regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// Segment is struct kvm_segment.
type Segment struct {
	Base     uint64
	Limit    uint32
	Selector uint16
	Type     uint8
	Present  uint8
	DPL      uint8
	DB       uint8
	S        uint8
	L        uint8
	G        uint8
	AVL      uint8
	Unusable uint8
	_        uint8
}

// DTable is struct kvm_dtable (GDTR/IDTR).
type DTable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

// Sregs is struct kvm_sregs.
type Sregs struct {
	CS, DS, ES, FS, GS, SS Segment
	TR, LDT                Segment
	GDT, IDT               DTable
	CR0, CR2, CR3, CR4     uint64
	CR8, EFER, APICBase    uint64
	InterruptBitmap        [4]uint64
}

// FPU is struct kvm_fpu.
type FPU struct {
	FPR        [8][16]uint8
	FCW        uint16
	FSW        uint16
	FTWX       uint8
	_          uint8
	LastOpcode uint16
	LastIP     uint64
	LastDP     uint64
	XMM        [16][16]uint8
	MXCSR      uint32
	_          uint32
}

// LAPICState is struct kvm_lapic_state: the local APIC register page.
type LAPICState struct {
	Regs [1024]byte
}

// MPState is struct kvm_mp_state.
type MPState struct {
	State uint32
}

// MP states.
const (
	MPStateRunnable      = 0
	MPStateUninitialized = 1
	MPStateInitReceived  = 2
	MPStateHalted        = 3
	MPStateSIPIReceived  = 4
)

// UserspaceMemoryRegion is struct kvm_userspace_memory_region.
type UserspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

// CPUIDEntry is struct kvm_cpuid_entry2.
type CPUIDEntry struct {
	Function uint32
	Index    uint32
	Flags    uint32
	EAX      uint32
	EBX      uint32
	ECX      uint32
	EDX      uint32
	_        [3]uint32
}

// CPUIDFlagSignificantIndex marks a leaf whose subleaf (Index) matters.
const CPUIDFlagSignificantIndex = 1

// cpuid2Header is struct kvm_cpuid2 without its flexible entries array.
type cpuid2Header struct {
	Nent uint32
	_    uint32
}

// MSREntry is struct kvm_msr_entry.
type MSREntry struct {
	Index uint32
	_     uint32
	Data  uint64
}

// msrsHeader is struct kvm_msrs without its entries.
type msrsHeader struct {
	NMSRs uint32
	_     uint32
}

type irqLevel struct {
	IRQ   uint32
	Level uint32
}

type irqfd struct {
	FD         uint32
	GSI        uint32
	Flags      uint32
	ResampleFD uint32
	_          [16]uint8
}

const (
	irqfdFlagDeassign = 1 << 0
)

type ioeventfd struct {
	Datamatch uint64
	Addr      uint64
	Len       uint32
	FD        int32
	Flags     uint32
	_         [36]uint8
}

const (
	ioeventfdFlagDatamatch = 1 << 0
	ioeventfdFlagPIO       = 1 << 1
	ioeventfdFlagDeassign  = 1 << 2
)

type pitConfig struct {
	Flags uint32
	_     [15]uint32
}

type msi struct {
	AddressLo uint32
	AddressHi uint32
	Data      uint32
	Flags     uint32
	DevID     uint32
	_         [12]uint8
}

// irqRoutingHeader is struct kvm_irq_routing without its entries.
type irqRoutingHeader struct {
	Nr    uint32
	Flags uint32
}

// irqRoutingEntry is struct kvm_irq_routing_entry; U is the union, laid
// out as irqchip {irqchip, pin} or msi {address_lo, address_hi, data, devid}.
type irqRoutingEntry struct {
	GSI   uint32
	Type  uint32
	Flags uint32
	_     uint32
	U     [8]uint32
}

const (
	irqRoutingIRQChip = 1
	irqRoutingMSI     = 2
)

// In-kernel irqchip IDs for IRQChip routes.
const (
	IRQChipPICMaster = 0
	IRQChipPICSlave  = 1
	IRQChipIOAPIC    = 2
)

// Capabilities used by tinyvmm (KVM_CHECK_EXTENSION arguments).
const (
	CapIRQChip            = 0
	CapUserMemory         = 3
	CapSetTSSAddr         = 4
	CapExtCPUID           = 7
	CapNrVCPUs            = 9
	CapIRQRouting         = 25
	CapIRQFD              = 32
	CapPIT2               = 33
	CapIoeventfd          = 36
	CapSetIdentityMapAddr = 37
	CapMaxVCPUs           = 66
	CapSignalMSI          = 77
	CapImmediateExit      = 136
)
