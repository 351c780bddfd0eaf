package boot

import (
	"encoding/binary"
	"fmt"
)

// Page-table entry bits.
const (
	ptePresent  = 1 << 0
	pteWritable = 1 << 1
	pteUser     = 1 << 2
	pteHuge     = 1 << 7 // a 2 MiB page in a PD entry
)

// maxMappedGiB is how much the PDs between pdAddr and pdEnd can map.
const maxMappedGiB = (pdEnd - pdAddr) / pageSize

// writeIdentityMap builds PML4 -> PDPT -> PDs that identity-map the first
// gibs GiB with 2 MiB pages (1 GiB pages are not on every CPU), user
// accessible when user is set. It returns CR3.
func writeIdentityMap(mem []byte, gibs uint64, user bool) (uint64, error) {
	if gibs == 0 || gibs > maxMappedGiB {
		return 0, fmt.Errorf("boot: identity map of %d GiB does not fit the page-table area (at most %d GiB); lower --mem", gibs, maxMappedGiB)
	}
	flags := uint64(ptePresent | pteWritable)
	if user {
		flags |= pteUser
	}
	clear(mem[pml4Addr : pdAddr+gibs*pageSize])
	binary.LittleEndian.PutUint64(mem[pml4Addr:], pdptAddr|flags)
	for g := uint64(0); g < gibs; g++ {
		pd := pdAddr + g*pageSize
		binary.LittleEndian.PutUint64(mem[pdptAddr+8*g:], pd|flags)
		for i := uint64(0); i < 512; i++ {
			phys := g*gib + i*2*mib
			binary.LittleEndian.PutUint64(mem[pd+8*i:], phys|flags|pteHuge)
		}
	}
	return pml4Addr, nil
}
