package vmm

import (
	"fmt"

	"golang.org/x/sys/unix"

	"tinyvmm/kvm"
	"tinyvmm/virtio"
)

// The guest physical map: RAM from 0 up to 3 GiB, the 32-bit hole for
// PCI BARs, the IOAPIC and the LAPIC, then the rest of RAM from 4 GiB.
const (
	lowMemTop    = 3 << 30
	highMemStart = 4 << 30
	pageSize     = 4096

	// The virtio-pci BARs are allocated upward from here; the IOAPIC
	// (0xfec00000) and LAPIC (0xfee00000) sit at the top of the hole.
	mmioHoleStart = 0xc0000000
	mmioHoleEnd   = 0xfec00000

	// Intel VMX needs three pages for real-mode TSS and one for the EPT
	// identity map, outside RAM and MMIO: just below the BIOS ROM area.
	tssAddr         = 0xfffbd000
	identityMapAddr = 0xfffbc000
)

// guestRAM is the guest's memory, mmap'd anonymous and private.
type guestRAM struct {
	low, high []byte
	regions   virtio.Regions
}

// allocRAM maps size bytes of guest RAM (rounded up to a page).
func allocRAM(size uint64) (*guestRAM, error) {
	size = (size + pageSize - 1) &^ (pageSize - 1)
	lowSize := min(size, lowMemTop)
	r := &guestRAM{}
	var err error
	if r.low, err = mapRAM(lowSize); err != nil {
		return nil, err
	}
	r.regions = virtio.Regions{{GPA: 0, Data: r.low}}
	if size > lowSize {
		if r.high, err = mapRAM(size - lowSize); err != nil {
			r.free()
			return nil, err
		}
		r.regions = append(r.regions, virtio.Region{GPA: highMemStart, Data: r.high})
	}
	return r, nil
}

func mapRAM(n uint64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("cannot map %d MiB of guest memory: %v (use a smaller --mem)", n>>20, err)
	}
	unix.Madvise(b, unix.MADV_HUGEPAGE) // a hint: fewer TLB misses where THP is on
	return b, nil
}

// register gives each region its own KVM memory slot.
func (r *guestRAM) register(vm *kvm.VM) error {
	for i, reg := range r.regions {
		if err := vm.SetUserMemoryRegion(uint32(i), reg.GPA, reg.Data, 0); err != nil {
			return err
		}
	}
	return nil
}

func (r *guestRAM) free() {
	if r.low != nil {
		unix.Munmap(r.low)
		r.low = nil
	}
	if r.high != nil {
		unix.Munmap(r.high)
		r.high = nil
	}
	r.regions = nil
}
