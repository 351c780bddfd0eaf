package pci

import "encoding/binary"

// Virtio PCI capability types (virtio 1.2, 4.1.4).
const (
	pciCapVendor = 0x09
	pciCapMSIX   = 0x11

	virtioCapCommon = 1
	virtioCapNotify = 2
	virtioCapISR    = 3
	virtioCapDevice = 4
	virtioCapPCICfg = 5

	// Offsets in the PCI_CFG capability, from its start.
	pciCfgBAR    = 4
	pciCfgOffset = 8
	pciCfgLength = 12
	pciCfgData   = 16
)

// addCapabilities announces the register blocks of BAR 0 and the MSI-X
// table. A virtio capability body (after ID and next) is cap_len, cfg_type,
// bar, id, two bytes of padding, offset and length; the notify capability
// adds notify_off_multiplier.
func (t *Transport) addCapabilities(queues int) error {
	vendorCap := func(typ uint8, offset, length uint32, extra ...uint32) []byte {
		b := make([]byte, 14+4*len(extra))
		b[0] = uint8(2 + len(b)) // cap_len counts the ID and next bytes
		b[1] = typ
		b[2] = 0 // BAR 0
		binary.LittleEndian.PutUint32(b[6:], offset)
		binary.LittleEndian.PutUint32(b[10:], length)
		for i, e := range extra {
			binary.LittleEndian.PutUint32(b[14+4*i:], e)
		}
		return b
	}
	caps := [][]byte{
		vendorCap(virtioCapCommon, barCommon, commonCfgLen),
		vendorCap(virtioCapNotify, barNotify, uint32(queues*notifyOffMultiplier), notifyOffMultiplier),
		vendorCap(virtioCapISR, barISR, 1),
		vendorCap(virtioCapDevice, barDevice, barBlock),
	}
	for _, c := range caps {
		if _, err := t.cfg.AddCapability(pciCapVendor, c, nil); err != nil {
			return err
		}
	}
	// The PCI_CFG capability: a window onto the BARs through config
	// space (the spec requires one; firmware uses it before BARs are
	// mapped). bar, offset, length and pci_cfg_data are writable.
	cfgCap := vendorCap(virtioCapPCICfg, 0, 0, 0)
	cfgMask := make([]byte, len(cfgCap))
	cfgMask[pciCfgBAR-2] = 0xff
	for i := pciCfgOffset - 2; i < len(cfgMask); i++ {
		cfgMask[i] = 0xff
	}
	off, err := t.cfg.AddCapability(pciCapVendor, cfgCap, cfgMask)
	if err != nil {
		return err
	}
	t.pciCfgCap = off

	msix := make([]byte, 10)
	binary.LittleEndian.PutUint16(msix[0:], uint16(queues)) // table size - 1: queues + config
	binary.LittleEndian.PutUint32(msix[2:], barMSIXTable)   // BIR 0
	binary.LittleEndian.PutUint32(msix[6:], barMSIXPBA)
	off, err = t.cfg.AddCapability(pciCapMSIX, msix, []byte{0, msixCtrlEnable>>8 | msixCtrlMask>>8})
	if err != nil {
		return err
	}
	t.msixCap = off
	return nil
}

func overlaps(offset uint8, size int, field uint8, fieldSize int) bool {
	return int(offset) < int(field)+fieldSize && int(field) < int(offset)+size
}

// configWritten follows guest writes to the capabilities: the MSI-X
// enable and function-mask bits change every vector's mask, and a write
// to pci_cfg_data goes to the BAR.
func (t *Transport) configWritten(offset uint8, size int) {
	if overlaps(offset, size, t.pciCfgCap+pciCfgData, 4) {
		if off, data, ok := t.pciCfgWindow(); ok {
			(*virtioBAR)(t).Write(off, data)
		}
	}
	ctrl := t.msixCap + 2
	if !overlaps(offset, size, ctrl, 2) {
		return
	}
	v := binary.LittleEndian.Uint16(t.cfg.Bytes(int(ctrl), 2))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.msix.enabled = v&msixCtrlEnable != 0
	t.msix.funcMask = v&msixCtrlMask != 0
	t.updateAllVectorsLocked()
}

// configRead fills pci_cfg_data from the BAR before the guest reads it.
func (t *Transport) configRead(offset uint8, size int) {
	if overlaps(offset, size, t.pciCfgCap+pciCfgData, 4) {
		if off, data, ok := t.pciCfgWindow(); ok {
			(*virtioBAR)(t).Read(off, data)
		}
	}
}

// pciCfgWindow returns the BAR offset and the part of pci_cfg_data that
// the PCI_CFG capability selects, when the selection is valid: BAR 0, a
// length of 1, 2 or 4, aligned, inside the BAR.
func (t *Transport) pciCfgWindow() (uint64, []byte, bool) {
	c := t.cfg.Bytes(int(t.pciCfgCap), 20)
	bar := c[pciCfgBAR]
	off := uint64(binary.LittleEndian.Uint32(c[pciCfgOffset:]))
	n := binary.LittleEndian.Uint32(c[pciCfgLength:])
	if bar != 0 || (n != 1 && n != 2 && n != 4) || off%uint64(n) != 0 || off+uint64(n) > BARSize {
		return 0, nil, false
	}
	return off, c[pciCfgData : pciCfgData+n], true
}
