package pci

// virtioBAR is the devices.BusDevice for BAR 0; offsets are relative to the BAR.
// Each register block gets a page; accesses outside a block read as 0 and
// are dropped.
type virtioBAR Transport

// Read implements devices.BusDevice.
func (b *virtioBAR) Read(off uint64, data []byte) {
	t := (*Transport)(b)
	block, rel := off&^(barBlock-1), off&(barBlock-1)
	if block == barDevice {
		t.dev.ReadConfig(rel, data) // the device guards its own config
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch block {
	case barCommon:
		t.commonRead(rel, data)
	case barISR:
		clear(data)
		if rel == 0 && len(data) > 0 {
			data[0] = uint8(t.isr.Swap(0)) // reading clears it
		}
	case barMSIXTable:
		t.msixTableRead(rel, data)
	case barMSIXPBA:
		t.msixPBARead(rel, data)
	default:
		clear(data)
	}
}

// Write implements devices.BusDevice.
func (b *virtioBAR) Write(off uint64, data []byte) {
	t := (*Transport)(b)
	block, rel := off&^(barBlock-1), off&(barBlock-1)
	if block == barDevice {
		t.dev.WriteConfig(rel, data)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch block {
	case barCommon:
		t.commonWrite(rel, data)
	case barNotify:
		// Here only in NotifyExit mode, before DRIVER_OK, or where the
		// ioeventfd could not be bound: the value is the queue index,
		// the address says the same.
		if rel%notifyOffMultiplier == 0 {
			t.kickLocked(rel / notifyOffMultiplier)
		}
	case barMSIXTable:
		t.msixTableWrite(rel, data)
	}
}
