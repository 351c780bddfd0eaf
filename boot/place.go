package boot

import (
	"bytes"
	"fmt"
)

// Limits for ELF kernels, which carry no setup header to say them.
const (
	elfCmdlineMax    = 2048       // x86 COMMAND_LINE_SIZE, with its NUL
	elfInitrdAddrMax = 0x7fffffff // what x86-64 bzImages declare
)

// check validates the layout the VMM hands in.
func (l Layout) check() error {
	if l.MemSize < 2*mib {
		return fmt.Errorf("boot: guest memory of %s is too small; raise --mem", size(l.MemSize))
	}
	if want := min(l.MemSize, lowMemLimit); uint64(len(l.Low)) != want {
		return fmt.Errorf("boot: Layout.Low is %s but MemSize %s puts %s below the PCI hole", size(uint64(len(l.Low))), size(l.MemSize), size(want))
	}
	if l.CPUs < 1 || l.CPUs > mpMaxCPUs {
		return fmt.Errorf("boot: %d CPUs asked; tinyvmm supports 1 to %d", l.CPUs, mpMaxCPUs)
	}
	return nil
}

// writeCmdline places the NUL-terminated command line at cmdlineAddr.
// limit is the kernel's buffer size, NUL included.
func writeCmdline(l Layout, cmdline string, limit uint64) (uint64, error) {
	limit = min(limit, cmdlineMax)
	if uint64(len(cmdline)) >= limit {
		return 0, fmt.Errorf("boot: command line is %d bytes; this kernel takes at most %d", len(cmdline), limit-1)
	}
	buf := l.Low[cmdlineAddr : cmdlineAddr+cmdlineMax]
	if !l.Zeroed {
		clear(buf)
	}
	buf[copy(buf, cmdline)] = 0
	return cmdlineAddr, nil
}

// placeInitrd reads the initrd into guest RAM as high as it may go: page
// aligned, above kernelEnd, ending at or below maxAddr (inclusive) and the
// end of low RAM.
func placeInitrd(l Layout, initrd File, kernelEnd, maxAddr uint64) (uint64, error) {
	n := fileSize(initrd)
	if n == 0 {
		return 0, nil
	}
	top := uint64(len(l.Low))
	if maxAddr < top-1 {
		top = maxAddr + 1
	}
	if n > top || (top-n)&^(pageSize-1) < kernelEnd {
		if top < uint64(len(l.Low)) {
			return 0, fmt.Errorf("boot: initrd (%s) does not fit between the kernel's end (%s) and its initrd limit (%s); use a smaller initrd", size(n), size(kernelEnd), size(top))
		}
		return 0, fmt.Errorf("boot: initrd (%s) does not fit in %s of guest memory; raise --mem", size(n), size(l.MemSize))
	}
	addr := (top - n) &^ (pageSize - 1)
	if err := readAt(initrd, l.Low[addr:addr+n], 0, "initrd"); err != nil {
		return 0, err
	}
	return addr, nil
}

// checkRange checks that [addr, addr+n) is low RAM at or above 1 MiB.
func checkRange(l Layout, addr, n uint64, what string) error {
	if addr < highMemAddr {
		return fmt.Errorf("boot: %s at %#x is below 1 MiB, where tinyvmm keeps its boot structures", what, addr)
	}
	if end := addr + n; end < addr || end > uint64(len(l.Low)) {
		return fmt.Errorf("boot: %s (%s at %s) does not fit in %s of guest memory; raise --mem", what, size(n), size(addr), size(l.MemSize))
	}
	return nil
}

// loadSegment reads an ELF segment from f to [Paddr, Paddr+Memsz) and
// zeroes the tail (its bss). parseELF checked that the file holds it.
func loadSegment(l Layout, f File, s elfSegment, what string) error {
	if err := checkRange(l, s.Paddr, s.Memsz, what); err != nil {
		return err
	}
	dst := l.Low[s.Paddr : s.Paddr+s.Memsz]
	if err := readAt(f, dst[:s.Filesz], s.Offset, what); err != nil {
		return err
	}
	if !l.Zeroed {
		clear(dst[s.Filesz:])
	}
	return nil
}

// notAKernel explains why a file that is neither a bzImage nor an ELF was
// refused, from its first bytes and its size.
func notAKernel(b []byte, size uint64) error {
	switch {
	case size == 0:
		return fmt.Errorf("boot: kernel file is empty")
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
		return fmt.Errorf("boot: kernel file is gzip-compressed; decompress it or pass the bzImage")
	case bytes.HasPrefix(b, []byte("MZ")) && size < hdrMagic+4:
		return fmt.Errorf("boot: bzImage is truncated (%d bytes, shorter than its setup header)", size)
	}
	return fmt.Errorf("boot: kernel file is not a Linux kernel: no bzImage header (HdrS) and no ELF magic")
}

// size prints a byte count in MiB (or KiB when small) for error messages.
func size(n uint64) string {
	switch {
	case n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n >= mib:
		return fmt.Sprintf("%.1f MiB", float64(n)/mib)
	case n%1024 == 0:
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d bytes", n)
}
