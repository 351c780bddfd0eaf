package devices

import "encoding/binary"

// Virtio PCI capability types (virtio 1.2, 4.1.4).
const (
	pciCapVendor = 0x09
	pciCapMSIX   = 0x11

	virtioCapCommon = 1
	virtioCapNotify = 2
	virtioCapISR    = 3
	virtioCapDevice = 4
)

// addCapabilities announces the register blocks of BAR 0 and the MSI-X
// table. A virtio capability body (after ID and next) is cap_len, cfg_type,
// bar, id, two bytes of padding, offset and length; the notify capability
// adds notify_off_multiplier.
func (t *VirtioPCI) addCapabilities(queues int) error {
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
	msix := make([]byte, 10)
	binary.LittleEndian.PutUint16(msix[0:], uint16(queues)) // table size - 1: queues + config
	binary.LittleEndian.PutUint32(msix[2:], barMSIXTable)   // BIR 0
	binary.LittleEndian.PutUint32(msix[6:], barMSIXPBA)
	off, err := t.cfg.AddCapability(pciCapMSIX, msix, []byte{0, msixCtrlEnable>>8 | msixCtrlMask>>8})
	if err != nil {
		return err
	}
	t.msixCap = off
	return nil
}

// configWritten follows guest writes to the capabilities: the MSI-X
// enable and function-mask bits change every vector's mask.
func (t *VirtioPCI) configWritten(offset uint8, size int) {
	ctrl := t.msixCap + 2
	if int(offset)+size <= int(ctrl) || offset >= ctrl+2 {
		return
	}
	v := binary.LittleEndian.Uint16(t.cfg.Bytes(int(ctrl), 2))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.msix.enabled = v&msixCtrlEnable != 0
	t.msix.funcMask = v&msixCtrlMask != 0
	t.updateAllVectorsLocked()
}
