package boot

// e820 entry types.
const (
	e820RAM      = 1
	e820Reserved = 2
)

type e820Entry struct {
	Addr, Size uint64
	Type       uint32
}

// e820Map is the guest's memory map: low RAM, the EBDA/BIOS hole (where
// the MP table lives), RAM from 1 MiB to the PCI hole, RAM above 4 GiB.
func e820Map(l Layout) []e820Entry {
	low := min(l.MemSize, lowMemLimit)
	m := []e820Entry{
		{0, ebdaAddr, e820RAM},
		{ebdaAddr, highMemAddr - ebdaAddr, e820Reserved},
		{highMemAddr, low - highMemAddr, e820RAM},
	}
	if l.MemSize > lowMemLimit {
		m = append(m, e820Entry{highRAMBase, l.MemSize - lowMemLimit, e820RAM})
	}
	return m
}
