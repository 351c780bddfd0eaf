package kvm

import (
	"testing"
	"unsafe"
)

// The sizes and numbers below were taken from <linux/kvm.h> by compiling
// sizeof()/the KVM_* macros with gcc; they are the kernel ABI.

func TestStructSizesMatchKernelABI(t *testing.T) {
	cases := []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"kvm_regs", unsafe.Sizeof(Regs{}), 144},
		{"kvm_sregs", unsafe.Sizeof(Sregs{}), 312},
		{"kvm_segment", unsafe.Sizeof(Segment{}), 24},
		{"kvm_dtable", unsafe.Sizeof(DTable{}), 16},
		{"kvm_fpu", unsafe.Sizeof(FPU{}), 416},
		{"kvm_lapic_state", unsafe.Sizeof(LAPICState{}), 1024},
		{"kvm_mp_state", unsafe.Sizeof(MPState{}), 4},
		{"kvm_userspace_memory_region", unsafe.Sizeof(UserspaceMemoryRegion{}), 32},
		{"kvm_cpuid_entry2", unsafe.Sizeof(CPUIDEntry{}), 40},
		{"kvm_cpuid2", unsafe.Sizeof(cpuid2Header{}), 8},
		{"kvm_msr_entry", unsafe.Sizeof(MSREntry{}), 16},
		{"kvm_msrs", unsafe.Sizeof(msrsHeader{}), 8},
		{"kvm_irq_level", unsafe.Sizeof(irqLevel{}), 8},
		{"kvm_irqfd", unsafe.Sizeof(irqfd{}), 32},
		{"kvm_ioeventfd", unsafe.Sizeof(ioeventfd{}), 64},
		{"kvm_pit_config", unsafe.Sizeof(pitConfig{}), 64},
		{"kvm_msi", unsafe.Sizeof(msi{}), 32},
		{"kvm_irq_routing", unsafe.Sizeof(irqRoutingHeader{}), 8},
		{"kvm_irq_routing_entry", unsafe.Sizeof(irqRoutingEntry{}), 48},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("sizeof(struct %s) = %d, kernel says %d", c.name, c.got, c.want)
		}
	}
}

func TestFieldOffsetsMatchKernelABI(t *testing.T) {
	var s Sregs
	var f FPU
	var e ioeventfd
	var r irqRoutingEntry
	cases := []struct {
		name      string
		got, want uintptr
	}{
		{"kvm_sregs.gdt", unsafe.Offsetof(s.GDT), 192},
		{"kvm_sregs.cr0", unsafe.Offsetof(s.CR0), 224},
		{"kvm_sregs.interrupt_bitmap", unsafe.Offsetof(s.InterruptBitmap), 280},
		{"kvm_fpu.last_ip", unsafe.Offsetof(f.LastIP), 136},
		{"kvm_fpu.xmm", unsafe.Offsetof(f.XMM), 152},
		{"kvm_fpu.mxcsr", unsafe.Offsetof(f.MXCSR), 408},
		{"kvm_ioeventfd.len", unsafe.Offsetof(e.Len), 16},
		{"kvm_ioeventfd.fd", unsafe.Offsetof(e.FD), 20},
		{"kvm_ioeventfd.flags", unsafe.Offsetof(e.Flags), 24},
		{"kvm_irq_routing_entry.u", unsafe.Offsetof(r.U), 16},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("offsetof(%s) = %d, kernel says %d", c.name, c.got, c.want)
		}
	}
}

func TestIoctlNumbersMatchKernel(t *testing.T) {
	cases := []struct {
		name      string
		got, want uintptr
	}{
		{"KVM_GET_API_VERSION", ioctlGetAPIVersion, 0xae00},
		{"KVM_CREATE_VM", ioctlCreateVM, 0xae01},
		{"KVM_GET_MSR_INDEX_LIST", ioctlGetMSRIndexList, 0xc004ae02},
		{"KVM_CHECK_EXTENSION", ioctlCheckExtension, 0xae03},
		{"KVM_GET_VCPU_MMAP_SIZE", ioctlGetVCPUMmapSize, 0xae04},
		{"KVM_GET_SUPPORTED_CPUID", ioctlGetSupportedCPUID, 0xc008ae05},
		{"KVM_CREATE_VCPU", ioctlCreateVCPU, 0xae41},
		{"KVM_SET_USER_MEMORY_REGION", ioctlSetUserMemoryRegion, 0x4020ae46},
		{"KVM_SET_TSS_ADDR", ioctlSetTSSAddr, 0xae47},
		{"KVM_SET_IDENTITY_MAP_ADDR", ioctlSetIdentityMapAddr, 0x4008ae48},
		{"KVM_CREATE_IRQCHIP", ioctlCreateIRQChip, 0xae60},
		{"KVM_IRQ_LINE", ioctlIRQLine, 0x4008ae61},
		{"KVM_SET_GSI_ROUTING", ioctlSetGSIRouting, 0x4008ae6a},
		{"KVM_IRQFD", ioctlIRQFD, 0x4020ae76},
		{"KVM_CREATE_PIT2", ioctlCreatePIT2, 0x4040ae77},
		{"KVM_IOEVENTFD", ioctlIoeventfd, 0x4040ae79},
		{"KVM_SIGNAL_MSI", ioctlSignalMSI, 0x4020aea5},
		{"KVM_RUN", ioctlRun, 0xae80},
		{"KVM_GET_REGS", ioctlGetRegs, 0x8090ae81},
		{"KVM_SET_REGS", ioctlSetRegs, 0x4090ae82},
		{"KVM_GET_SREGS", ioctlGetSregs, 0x8138ae83},
		{"KVM_SET_SREGS", ioctlSetSregs, 0x4138ae84},
		{"KVM_GET_MSRS", ioctlGetMSRs, 0xc008ae88},
		{"KVM_SET_MSRS", ioctlSetMSRs, 0x4008ae89},
		{"KVM_GET_FPU", ioctlGetFPU, 0x81a0ae8c},
		{"KVM_SET_FPU", ioctlSetFPU, 0x41a0ae8d},
		{"KVM_GET_LAPIC", ioctlGetLAPIC, 0x8400ae8e},
		{"KVM_SET_LAPIC", ioctlSetLAPIC, 0x4400ae8f},
		{"KVM_SET_CPUID2", ioctlSetCPUID2, 0x4008ae90},
		{"KVM_GET_CPUID2", ioctlGetCPUID2, 0xc008ae91},
		{"KVM_GET_MP_STATE", ioctlGetMPState, 0x8004ae98},
		{"KVM_SET_MP_STATE", ioctlSetMPState, 0x4004ae99},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %#x, kernel says %#x", c.name, c.got, c.want)
		}
	}
}

// fakeRun builds a kvm_run page the way the kernel fills it.
func fakeRun(reason ExitReason) []byte {
	run := make([]byte, 4096)
	run[runExitReason] = byte(reason)
	return run
}

func TestDecodeIOExit(t *testing.T) {
	run := fakeRun(ExitIO)
	u := runExitUnion
	run[u] = 1                      // out
	run[u+1] = 2                    // size
	run[u+2], run[u+3] = 0x01, 0x05 // port 0x501
	run[u+4] = 3                    // count
	run[u+8] = 0x00                 // data_offset 0x200
	run[u+9] = 0x02
	copy(run[0x200:], []byte{1, 2, 3, 4, 5, 6})
	e := decoder(run).io()
	if !e.Out || e.Size != 2 || e.Port != 0x501 || e.Count != 3 || len(e.Data) != 6 || e.Data[5] != 6 {
		t.Fatalf("decoded %+v", e)
	}
	if got := decoder(run).reason(); got != ExitIO {
		t.Fatalf("reason %v", got)
	}
	// A data_offset past the page yields no data, not a panic.
	run[u+9] = 0x20
	if e := decoder(run).io(); e.Data != nil {
		t.Fatalf("out-of-page data_offset decoded %d bytes", len(e.Data))
	}
}

func TestDecodeMMIOExit(t *testing.T) {
	run := fakeRun(ExitMMIO)
	u := runExitUnion
	copy(run[u:], []byte{0x00, 0x10, 0x00, 0xc0}) // phys_addr 0xc0001000
	copy(run[u+8:], []byte{0xaa, 0xbb, 0xcc, 0xdd})
	run[u+16] = 4 // len
	run[u+20] = 1 // is_write
	e := decoder(run).mmio()
	if e.Addr != 0xc0001000 || !e.IsWrite || len(e.Data) != 4 || e.Data[3] != 0xdd {
		t.Fatalf("decoded %+v", e)
	}
	run[u+16] = 200 // a bogus length is clamped to the 8-byte data field
	if e := decoder(run).mmio(); len(e.Data) != 8 {
		t.Fatalf("len 200 decoded to %d bytes", len(e.Data))
	}
}

func TestDecodeSystemEventAndErrors(t *testing.T) {
	run := fakeRun(ExitSystemEvent)
	u := runExitUnion
	run[u] = SystemEventReset
	run[u+4] = 1
	run[u+8] = 0x42
	se := decoder(run).systemEvent()
	if se.Type != SystemEventReset || len(se.Data) != 1 || se.Data[0] != 0x42 {
		t.Fatalf("system event %+v", se)
	}
	run[u+4] = 200 // ndata clamped to 16
	if se := decoder(run).systemEvent(); len(se.Data) != 16 {
		t.Fatalf("ndata 200 decoded to %d", len(se.Data))
	}
	run[u] = InternalErrorEmulation
	run[u+4] = 0
	if ie := decoder(run).internalError(); ie.Suberror != 1 || ie.Error() == "" {
		t.Fatalf("internal error %+v", ie)
	}
	run[u] = 0x21
	run[u+8] = 7
	if fe := decoder(run).failEntry(); fe.Reason != 0x21 || fe.CPU != 7 {
		t.Fatalf("fail entry %+v", fe)
	}
	if ExitShutdown.String() != "KVM_EXIT_SHUTDOWN" || ExitReason(99).String() != "KVM_EXIT_99" {
		t.Fatal("exit names")
	}
}

func TestDefaultRoutesMatchKVM(t *testing.T) {
	rs := DefaultIRQChipRoutes()
	if len(rs) != 16*2+8 {
		t.Fatalf("%d default routes, KVM installs 40", len(rs))
	}
	raw := rs[len(rs)-1].raw()
	if raw.GSI != 23 || raw.Type != irqRoutingIRQChip || raw.U[0] != IRQChipIOAPIC || raw.U[1] != 23 {
		t.Fatalf("last route %+v", raw)
	}
	m := Route{GSI: 24, MSI: true, MSIAddr: 0x1_fee0_0000, MSIData: 0x4041}.raw()
	if m.Type != irqRoutingMSI || m.U[0] != 0xfee00000 || m.U[1] != 1 || m.U[2] != 0x4041 {
		t.Fatalf("msi route %+v", m)
	}
}
