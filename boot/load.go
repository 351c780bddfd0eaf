package boot

import "fmt"

// loadBzImage boots through the 64-bit entry of a bzImage. head is the
// file's first bytes, up to the end of the setup header.
func loadBzImage(l Layout, img Image, head []byte) (CPUState, error) {
	size := fileSize(img.Kernel)
	h, err := parseSetupHeader(head, size)
	if err != nil {
		return CPUState{}, err
	}
	load := h.loadAddress(uint64(len(l.Low)))
	pmLen := size - uint64(h.KernelOffset)
	if err := checkRange(l, load, pmLen, "kernel"); err != nil {
		return CPUState{}, err
	}
	// The kernel decompresses to its runtime address, never below
	// pref_address (LOAD_PHYSICAL_ADDR), and needs init_size bytes there.
	// It clears what it uses itself, so only the file is read.
	runtime := max(load, h.PrefAddress)
	if err := checkRange(l, runtime, uint64(h.InitSize), "kernel"); err != nil {
		return CPUState{}, err
	}
	if err := readAt(img.Kernel, l.Low[load:load+pmLen], uint64(h.KernelOffset), "bzImage"); err != nil {
		return CPUState{}, err
	}
	kernelEnd := max(load+pmLen, runtime+uint64(h.InitSize))
	cmdline, err := writeCmdline(l, img.Cmdline, uint64(h.CmdlineSize)+1)
	if err != nil {
		return CPUState{}, err
	}
	maxAddr := uint64(h.InitrdAddrMax)
	switch {
	case h.Xloadflags&xlfAbove4G != 0:
		maxAddr = ^uint64(0)
	case maxAddr == 0:
		maxAddr = 0x37ffffff // the protocol's default for kernels that do not say
	}
	initrd, err := placeInitrd(l, img.Initrd, kernelEnd, maxAddr)
	if err != nil {
		return CPUState{}, err
	}
	writeZeroPage(l.Low, bootParams{
		header: head[hdrStart:h.HeaderEnd], cmdline: cmdline,
		initrd: initrd, initrdSize: fileSize(img.Initrd), e820: e820Map(l),
	})
	return start64(l, load+kernel64Offset)
}

// loadELF loads an uncompressed vmlinux at its physical addresses and
// enters it through PVH when it has the note, else through the 64-bit entry.
func loadELF(l Layout, img Image) (CPUState, error) {
	k, err := parseELF(img.Kernel)
	if err != nil {
		return CPUState{}, err
	}
	var end uint64
	for i, s := range k.Segments {
		if err := loadSegment(l, img.Kernel, s, fmt.Sprintf("kernel segment %d", i)); err != nil {
			return CPUState{}, err
		}
		end = max(end, s.Paddr+s.Memsz)
	}
	cmdline, err := writeCmdline(l, img.Cmdline, elfCmdlineMax)
	if err != nil {
		return CPUState{}, err
	}
	initrd, err := placeInitrd(l, img.Initrd, end, elfInitrdAddrMax)
	if err != nil {
		return CPUState{}, err
	}
	initrdSize := fileSize(img.Initrd)
	e820 := e820Map(l)
	if k.HasPVH {
		if !inSegments(k.Segments, k.PVHEntry) {
			return CPUState{}, fmt.Errorf("boot: ELF kernel's PVH entry %#x is outside its loaded segments", k.PVHEntry)
		}
		writeStartInfo(l.Low, cmdline, initrd, initrdSize, e820)
		if err := writeMPTable(l.Low, l.CPUs); err != nil {
			return CPUState{}, err
		}
		return pvhState(k.PVHEntry, startInfoAddr, writeGDT(l.Low, tssSegment(0, tssMinLimit))), nil
	}
	entry, ok := k.physEntry()
	if !ok {
		return CPUState{}, fmt.Errorf("boot: ELF kernel's entry %#x is outside its loaded segments", k.Entry)
	}
	writeZeroPage(l.Low, bootParams{cmdline: cmdline, initrd: initrd, initrdSize: initrdSize, e820: e820})
	return start64(l, entry)
}

// start64 writes what every 64-bit entry needs besides boot_params.
func start64(l Layout, entry uint64) (CPUState, error) {
	if err := writeMPTable(l.Low, l.CPUs); err != nil {
		return CPUState{}, err
	}
	cr3, err := writeIdentityMap(l.Low, 4, false)
	if err != nil {
		return CPUState{}, err
	}
	return longModeState(entry, zeroPageAddr, cr3, writeGDT(l.Low, tssSegment(0, tssMinLimit))), nil
}

func inSegments(segs []elfSegment, paddr uint64) bool {
	for _, s := range segs {
		if paddr >= s.Paddr && paddr-s.Paddr < s.Memsz {
			return true
		}
	}
	return false
}
