package vmm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"tinyvmm/kvm"
)

// fakeVM records what the hypervisor asks of KVM.
type fakeVM struct {
	mu        sync.Mutex
	tables    [][]kvm.Route
	irqfds    map[uint32]int
	ioevents  map[uint64]int
	maxRoutes int
}

func newFakeVM() *fakeVM {
	return &fakeVM{irqfds: map[uint32]int{}, ioevents: map[uint64]int{}, maxRoutes: 1024}
}

func (f *fakeVM) CheckExtension(c int) int {
	if c == kvm.CapIRQRouting {
		return f.maxRoutes
	}
	return 1
}
func (f *fakeVM) AddIoeventfd(e kvm.Ioeventfd) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.ioevents[e.Addr]; dup {
		return fmt.Errorf("EEXIST")
	}
	f.ioevents[e.Addr] = e.FD
	return nil
}
func (f *fakeVM) RemoveIoeventfd(e kvm.Ioeventfd) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ioevents[e.Addr] != e.FD {
		return fmt.Errorf("ENOENT")
	}
	delete(f.ioevents, e.Addr)
	return nil
}
func (f *fakeVM) AssignIRQFD(fd int, gsi uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.irqfds[gsi] = fd
	return nil
}
func (f *fakeVM) DeassignIRQFD(fd int, gsi uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.irqfds[gsi] != fd {
		return fmt.Errorf("ENOENT")
	}
	delete(f.irqfds, gsi)
	return nil
}
func (f *fakeVM) SetGSIRouting(rs []kvm.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables = append(f.tables, append([]kvm.Route(nil), rs...))
	return nil
}

func (f *fakeVM) lastTable() []kvm.Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.tables) == 0 {
		return nil
	}
	return f.tables[len(f.tables)-1]
}

func (f *fakeVM) pushes() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.tables) }

func msiRoutes(rs []kvm.Route) []kvm.Route {
	var out []kvm.Route
	for _, r := range rs {
		if r.MSI {
			out = append(out, r)
		}
	}
	return out
}

// eventfdValue reads (and resets) an eventfd's counter; 0 if unsignalled.
func eventfdValue(fd int) uint64 {
	var b [8]byte
	if n, err := unix.Read(fd, b[:]); err != nil || n != 8 {
		return 0
	}
	return binary.NativeEndian.Uint64(b[:])
}

func TestMSIVectorsKeepTheWholeRoutingTable(t *testing.T) {
	vm := newFakeVM()
	h := newHypervisor(vm)
	a, err := h.NewMSIVector()
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.NewMSIVector()
	if err != nil {
		t.Fatal(err)
	}
	va, vb := a.(*msiVector), b.(*msiVector)
	if va.gsi != firstMSIGSI || vb.gsi != firstMSIGSI+1 {
		t.Fatalf("GSIs %d, %d; want %d, %d", va.gsi, vb.gsi, firstMSIGSI, firstMSIGSI+1)
	}
	if vm.irqfds[va.gsi] != va.fd || vm.irqfds[vb.gsi] != vb.fd {
		t.Fatal("irqfds not assigned")
	}
	if vm.pushes() != 0 {
		t.Fatal("routing table pushed before any vector was unmasked")
	}
	if err := a.Update(0xfee00000, 0x41, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(0xfee01000, 0x42, false); err != nil {
		t.Fatal(err)
	}
	table := vm.lastTable()
	if n := len(table) - len(msiRoutes(table)); n != len(kvm.DefaultIRQChipRoutes()) {
		t.Errorf("table keeps %d irqchip routes, want all %d", n, len(kvm.DefaultIRQChipRoutes()))
	}
	if m := msiRoutes(table); len(m) != 2 || m[0].MSIData != 0x41 || m[1].MSIAddr != 0xfee01000 {
		t.Fatalf("MSI routes %+v", m)
	}
	pushes := vm.pushes()
	if err := a.Update(0xfee00000, 0x41, false); err != nil {
		t.Fatal(err)
	}
	if vm.pushes() != pushes {
		t.Error("an unchanged route was pushed again")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if m := msiRoutes(vm.lastTable()); len(m) != 1 || m[0].GSI != vb.gsi {
		t.Fatalf("after Close, MSI routes %+v", m)
	}
	if _, ok := vm.irqfds[va.gsi]; ok {
		t.Error("irqfd still assigned after Close")
	}
	if err := a.Trigger(); err == nil {
		t.Error("Trigger on a closed vector succeeded")
	}
	b.Close()
}

func TestMSIVectorPendsWhileMasked(t *testing.T) {
	h := newHypervisor(newFakeVM())
	v, err := h.NewMSIVector()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	fd := v.(*msiVector).fd
	if err := v.Trigger(); err != nil {
		t.Fatal(err)
	}
	if eventfdValue(fd) != 0 {
		t.Fatal("a masked vector signalled")
	}
	if err := v.Update(0xfee00000, 0x30, false); err != nil {
		t.Fatal(err)
	}
	if eventfdValue(fd) != 1 {
		t.Fatal("the pending interrupt was not delivered at unmask")
	}
	if err := v.Trigger(); err != nil || eventfdValue(fd) != 1 {
		t.Fatal("an unmasked vector did not signal")
	}
	v.Update(0xfee00000, 0x30, true)
	v.Update(0xfee00000, 0x30, false)
	if eventfdValue(fd) != 0 {
		t.Fatal("unmask without a pending interrupt signalled")
	}
}

func TestGSIsAreReusedAndBounded(t *testing.T) {
	vm := newFakeVM()
	vm.maxRoutes = firstMSIGSI + 2
	h := newHypervisor(vm)
	a, _ := h.NewMSIVector()
	b, err := h.NewMSIVector()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.NewMSIVector(); err == nil {
		t.Fatal("allocated past KVM's GSI limit")
	}
	gsi := a.(*msiVector).gsi
	a.Close()
	c, err := h.NewMSIVector()
	if err != nil || c.(*msiVector).gsi != gsi {
		t.Fatalf("freed GSI %d not reused: %v", gsi, err)
	}
	b.Close()
	c.Close()
}

func TestHypervisorIoeventfd(t *testing.T) {
	vm := newFakeVM()
	h := newHypervisor(vm)
	if err := h.AddIoeventfd(0xc0003000, 2, 9); err != nil {
		t.Fatal(err)
	}
	if vm.ioevents[0xc0003000] != 9 {
		t.Fatal("ioeventfd not registered")
	}
	if err := h.RemoveIoeventfd(0xc0003000, 2, 9); err != nil {
		t.Fatal(err)
	}
	if len(vm.ioevents) != 0 {
		t.Fatal("ioeventfd not removed")
	}
}
