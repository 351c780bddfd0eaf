package pci_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"tinyvmm/devices"
	"tinyvmm/virtio"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtio/virtiotest"
)

// workerDevice runs a goroutine per activation that triggers interrupts
// and reports failures until Reset stops it, like a real device worker.
type workerDevice struct {
	fakeDevice
	stop chan struct{}
	wg   sync.WaitGroup
}

func (d *workerDevice) Activate(a virtio.Activation) error {
	d.stop = make(chan struct{})
	d.wg.Add(1)
	go func(stop chan struct{}) {
		defer d.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, irq := range a.Interrupts {
				if irq != nil {
					irq.Trigger()
				}
			}
			if i%50 == 49 {
				a.Fail(errors.New("worker gave up"))
			}
		}
	}(d.stop)
	return nil
}

func (d *workerDevice) Reset() {
	if d.stop != nil {
		close(d.stop)
		d.wg.Wait()
		d.stop = nil
	}
}

// TestVirtioPCIResetWhileWorkerRuns: resets, mask changes and register
// reads race with a worker that triggers interrupts and fails; run with
// -race. Reset must wait for the worker and never deadlock with Fail.
func TestVirtioPCIResetWhileWorkerRuns(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	dev := &workerDevice{}
	vp, err := pci.New(dev, g.hv, g.drv.Mem, pci.Options{BARAddr: 0xd0000000, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer vp.Close()
	g.vp, g.dev = vp, &dev.fakeDevice
	g.pci = devices.NewPCIBus(g.mmio)
	if g.slot, err = g.pci.Add(vp.PCI()); err != nil {
		t.Fatal(err)
	}
	g.probe2(0xd0000000)
	for round := 0; round < 20; round++ {
		g.enableMSIX()
		g.negotiate(virtio.FeatureVersion1)
		rx, _ := g.drv.NewQueue(16, ringOpts())
		tx, _ := g.drv.NewQueue(16, ringOpts())
		g.setupQueue(0, rx, 1)
		g.setupQueue(1, tx, 2)
		g.setCC(0x10, 2, 0)
		g.setCC(0x14, 1, 0xf)
		for i := 0; i < 20; i++ {
			g.write(g.msixTable+16*uint64(i%3)+12, 4, uint64(i%2)) // mask, unmask
			g.read(g.isr, 1)
			g.status()
		}
		g.setCC(0x14, 1, 0)
		if g.status() != 0 {
			t.Fatalf("round %d: status %#x after reset", round, g.status())
		}
	}
	var open int
	for _, v := range g.hv.vectors {
		if !v.closed {
			open++
		}
	}
	if open != 0 {
		t.Fatalf("%d MSI vectors still open after the last reset", open)
	}
}

// probe2 is probe for a transport at another BAR address.
func (g *linuxGuest) probe2(bar uint64) {
	g.bar = bar
	for p := int(g.cfgRead(0x34, 1)); p != 0; p = int(g.cfgRead(p+1, 1)) {
		switch g.cfgRead(p, 1) {
		case 0x11:
			g.msixCap = p
			g.msixTable = bar + uint64(g.cfgRead(p+4, 4))
			g.msixPBA = bar + uint64(g.cfgRead(p+8, 4))
		case 0x09:
			off := bar + uint64(g.cfgRead(p+8, 4))
			switch g.cfgRead(p+3, 1) {
			case 1:
				g.common = off
			case 2:
				g.notify, g.notifyMult = off, g.cfgRead(p+16, 4)
			case 3:
				g.isr = off
			case 4:
				g.devcfg = off
			}
		}
	}
}

// FuzzVirtioPCI applies arbitrary config-space and BAR accesses to a
// transport: nothing may panic or deadlock, whatever the order.
func FuzzVirtioPCI(f *testing.F) {
	f.Add([]byte{0, 0x14, 0, 1, 1, 0x0f, 1, 0x04, 0x30, 2, 0xff, 0xff})
	f.Add([]byte{1, 0x46, 0, 2, 0x00, 0xc0, 0, 0x1c, 0, 2, 1, 0, 0, 0x14, 0, 1, 0xf})
	f.Fuzz(func(t *testing.T, ops []byte) {
		hv := newFakeHV()
		mmio := devices.NewMMIOBus()
		bus := devices.NewPCIBus(mmio)
		mem := virtio.FlatMemory(make([]byte, 1<<16))
		vp, err := pci.New(&fakeDevice{}, hv, mem, pci.Options{BARAddr: barAddr, Logf: func(string, ...any) {}})
		if err != nil {
			t.Fatal(err)
		}
		defer vp.Close()
		slot, _ := bus.Add(vp.PCI())
		// Each op: kind, offset (2 bytes), size, value bytes.
		for len(ops) >= 5 {
			kind, off, size := ops[0]%4, uint64(binary.LittleEndian.Uint16(ops[1:])), int(ops[3]%8)+1
			ops = ops[4:]
			val := make([]byte, size)
			ops = ops[copy(val, ops):]
			switch kind {
			case 0:
				mmio.Write(barAddr+off%pci.BARSize, val)
			case 1:
				var a [4]byte
				binary.LittleEndian.PutUint32(a[:], 1<<31|uint32(slot)<<11|uint32(off)&0xfc)
				bus.Write(0, a[:])
				bus.Write(4+off%4, val[:min(size, 4)])
			case 2:
				mmio.Read(barAddr+off%pci.BARSize, val)
			case 3:
				bus.Read(4+off%4, val[:min(size, 4)])
			}
		}
	})
}

func ringOpts() virtiotest.RingOptions { return virtiotest.RingOptions{NoKickFD: true} }
