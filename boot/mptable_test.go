package boot

import "testing"

// checkMPTable finds the floating pointer the way Linux does (a 16-byte
// aligned scan of 0xf0000-0xfffff) and checks the whole table.
func checkMPTable(t *testing.T, mem []byte, cpus int) {
	t.Helper()
	fp := -1
	for a := 0xf0000; a < 0x100000; a += 16 {
		if string(mem[a:a+4]) == "_MP_" {
			fp = a
			break
		}
	}
	if fp < 0 {
		t.Fatal("no MP floating pointer in 0xf0000-0xfffff")
	}
	f := mem[fp : fp+16]
	if sum(f) != 0 || f[8] != 1 || f[9] != 4 || f[11] != 0 {
		t.Fatalf("floating pointer %x: checksum %d, length %d, rev %d, default config %d", f, sum(f), f[8], f[9], f[11])
	}
	ct := int(le.Uint32(f[4:]))
	if ct < 0x9fc00 || ct >= 0x100000 {
		t.Fatalf("config table at %#x, outside the reserved BIOS area", ct)
	}
	h := mem[ct:]
	n := int(le.Uint16(h[4:]))
	if string(h[:4]) != "PCMP" || h[6] != 4 || sum(h[:n]) != 0 || le.Uint32(h[36:]) != 0xfee00000 {
		t.Fatalf("config header %x, checksum %d", h[:44], sum(h[:n]))
	}
	count := int(le.Uint16(h[34:]))
	e := h[44:n]
	var cpuIDs []int
	var ioapic, buses, locals int
	irqPins := map[int]int{}
	for i := 0; i < count; i++ {
		switch e[0] {
		case 0:
			cpuIDs = append(cpuIDs, int(e[1]))
			if e[3]&1 == 0 || (e[3]&2 != 0) != (len(cpuIDs) == 1) {
				t.Errorf("CPU %d flags %#x (enabled; BSP flag on the first only)", e[1], e[3])
			}
			e = e[20:]
			continue
		case 1:
			buses++
			if e[1] != 0 || string(e[2:8]) != "ISA   " {
				t.Errorf("bus entry %x", e[:8])
			}
		case 2:
			ioapic++
			if int(e[1]) != cpus || e[3]&1 == 0 || le.Uint32(e[4:]) != 0xfec00000 {
				t.Errorf("IO APIC entry %x", e[:8])
			}
		case 3:
			if e[1] != 0 || e[4] != 0 || int(e[6]) != cpus {
				t.Errorf("I/O interrupt entry %x", e[:8])
			}
			irqPins[int(e[5])] = int(e[7])
		case 4:
			locals++
		default:
			t.Fatalf("unknown entry type %d", e[0])
		}
		e = e[8:]
	}
	if len(e) != 0 {
		t.Errorf("%d bytes after the last entry", len(e))
	}
	if len(cpuIDs) != cpus || buses != 1 || ioapic != 1 || locals != 2 || len(irqPins) != 16 {
		t.Errorf("cpus %v buses %d ioapics %d local %d irqs %v", cpuIDs, buses, ioapic, locals, irqPins)
	}
	for i, id := range cpuIDs {
		if id != i {
			t.Errorf("CPU entry %d has APIC ID %d", i, id)
		}
	}
	for irq := 0; irq < 16; irq++ {
		if pin, ok := irqPins[irq]; !ok || pin != irq {
			t.Errorf("ISA IRQ %d -> pin %d (%v)", irq, pin, ok)
		}
	}
}

func TestMPTable(t *testing.T) {
	for _, cpus := range []int{1, 2, 8, 254} {
		l := newLayout(t, 64*mib, cpus)
		if _, err := Load(l, Image{Kernel: Bytes(defaultBz().build())}); err != nil {
			t.Fatal(err)
		}
		checkMPTable(t, l.Low, cpus)
	}
}
