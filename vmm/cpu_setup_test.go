package vmm

import (
	"testing"

	"golang.org/x/sys/unix"

	"tinyvmm/boot"
	"tinyvmm/kvm"
)

type fakeState struct {
	sregs kvm.Sregs
	regs  kvm.Regs
	fpu   kvm.FPU
}

func (f *fakeState) Sregs() (kvm.Sregs, error)  { return f.sregs, nil }
func (f *fakeState) SetSregs(s kvm.Sregs) error { f.sregs = s; return nil }
func (f *fakeState) SetFPU(p kvm.FPU) error     { f.fpu = p; return nil }
func (f *fakeState) SetRegs(r kvm.Regs) error   { f.regs = r; return nil }

// loadTiny lays out a tiny ELF the way Run does and returns its state.
func loadTiny(t *testing.T, pvh bool) boot.CPUState {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	st, err := boot.Load(boot.Layout{Low: mem, MemSize: 64 << 20, CPUs: 1}, boot.Image{Kernel: boot.Bytes(tinyELF(helloExit7, pvh)), Cmdline: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestBootStateLongMode(t *testing.T) {
	st := loadTiny(t, false)
	var f fakeState
	if err := setBootState(&f, st); err != nil {
		t.Fatal(err)
	}
	s := f.sregs
	if s.CS.L != 1 || s.CS.DB != 0 || s.CS.Present != 1 || s.CS.S != 1 {
		t.Errorf("CS %+v is not a 64-bit code segment", s.CS)
	}
	if s.EFER&(1<<8) == 0 || s.EFER&(1<<10) == 0 || s.CR0&(1<<31) == 0 || s.CR4&(1<<5) == 0 || s.CR3 == 0 {
		t.Errorf("not in long mode: CR0 %#x CR3 %#x CR4 %#x EFER %#x", s.CR0, s.CR3, s.CR4, s.EFER)
	}
	if s.TR.Present != 1 || s.TR.Type != 11 || s.LDT.Unusable != 1 {
		t.Errorf("TR %+v LDT %+v", s.TR, s.LDT)
	}
	if s.GDT.Base != st.GDTBase || s.GDT.Limit != st.GDTLimit {
		t.Errorf("GDT %+v, boot said %#x/%#x", s.GDT, st.GDTBase, st.GDTLimit)
	}
	if f.regs.RIP != 0x100000 || f.regs.RSI != st.RSI || f.regs.RSI == 0 || f.regs.RFLAGS&2 == 0 {
		t.Errorf("regs %+v", f.regs)
	}
	if f.fpu.FCW != 0x37f || f.fpu.MXCSR != 0x1f80 {
		t.Errorf("FPU FCW %#x MXCSR %#x", f.fpu.FCW, f.fpu.MXCSR)
	}
}

func TestBootStatePVH(t *testing.T) {
	st := loadTiny(t, true)
	var f fakeState
	if err := setBootState(&f, st); err != nil {
		t.Fatal(err)
	}
	s := f.sregs
	if s.CR0&1 == 0 || s.CR0&(1<<31) != 0 || s.EFER != 0 {
		t.Errorf("PVH wants protected mode without paging: CR0 %#x EFER %#x", s.CR0, s.EFER)
	}
	if s.CS.DB != 1 || s.CS.L != 0 || s.CS.G != 1 || s.CS.Limit < 0xfffff {
		t.Errorf("CS %+v is not flat 32-bit", s.CS)
	}
	if f.regs.RBX == 0 || f.regs.RBX != st.RBX {
		t.Errorf("RBX %#x: PVH passes start_info there", f.regs.RBX)
	}
}
