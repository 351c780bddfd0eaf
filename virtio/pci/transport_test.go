package pci_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"tinyvmm/devices"
	"tinyvmm/virtio"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtio/virtiotest"
)

const barAddr = 0xc0000000

// linuxGuest plays Linux's virtio_pci_modern against a transport: config
// space through ports 0xCF8/0xCFC, registers through the MMIO bus.
type linuxGuest struct {
	t    *testing.T
	pci  *devices.PCIBus
	mmio *devices.Bus
	hv   *fakeHV
	dev  *fakeDevice
	vp   *pci.Transport
	drv  *virtiotest.Driver
	slot int
	// found by probe
	bar                         uint64
	common, isr, devcfg, notify uint64
	notifyMult                  uint32
	msixCap                     int
	msixTable, msixPBA          uint64
	logs                        []string
}

func newGuest(t *testing.T, mode pci.NotifyMode) *linuxGuest {
	g := &linuxGuest{t: t, mmio: devices.NewMMIOBus(), hv: newFakeHV(), dev: &fakeDevice{}}
	copy(g.dev.config[:], []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56})
	g.pci = devices.NewPCIBus(g.mmio)
	g.drv = virtiotest.New(4 << 20)
	t.Cleanup(func() { g.drv.Close() })
	var err error
	g.vp, err = pci.New(g.dev, g.hv, g.drv.Mem, pci.Options{
		BARAddr: barAddr, Notify: mode,
		Logf: func(f string, a ...any) { g.logs = append(g.logs, f) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.vp.Close)
	if g.slot, err = g.pci.Add(g.vp.PCI()); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *linuxGuest) cfgRead(reg, size int) uint32 {
	var a, d [4]byte
	binary.LittleEndian.PutUint32(a[:], 1<<31|uint32(g.slot)<<11|uint32(reg)&0xfc)
	g.pci.Write(0, a[:])
	g.pci.Read(4+uint64(reg&3), d[:size])
	return binary.LittleEndian.Uint32(d[:])
}

func (g *linuxGuest) cfgWrite(reg, size int, v uint32) {
	var a, d [4]byte
	binary.LittleEndian.PutUint32(a[:], 1<<31|uint32(g.slot)<<11|uint32(reg)&0xfc)
	g.pci.Write(0, a[:])
	binary.LittleEndian.PutUint32(d[:], v)
	g.pci.Write(4+uint64(reg&3), d[:size])
}

func (g *linuxGuest) read(addr uint64, size int) uint64 {
	var d [8]byte
	if !g.mmio.Read(addr, d[:size]) {
		g.t.Fatalf("MMIO read at %#x reached no device", addr)
	}
	return binary.LittleEndian.Uint64(d[:])
}

func (g *linuxGuest) write(addr uint64, size int, v uint64) {
	var d [8]byte
	binary.LittleEndian.PutUint64(d[:], v)
	if !g.mmio.Write(addr, d[:size]) {
		g.t.Fatalf("MMIO write at %#x reached no device", addr)
	}
}

// common config accessors
func (g *linuxGuest) cc(off uint64, size int) uint64       { return g.read(g.common+off, size) }
func (g *linuxGuest) setCC(off uint64, size int, v uint64) { g.write(g.common+off, size, v) }
func (g *linuxGuest) status() uint8                        { return uint8(g.cc(0x14, 1)) }

// probe does what pci_device_probe and vp_modern_probe do: identify the
// function, size BAR 0, enable it, and find the capabilities.
func (g *linuxGuest) probe() {
	t := g.t
	if id := g.cfgRead(0, 4); id != 0x1041<<16|0x1af4 {
		t.Fatalf("id = %#x, want 1af4:1041", id)
	}
	if rev := g.cfgRead(0x08, 1); rev != 1 {
		t.Fatalf("revision %d, want 1", rev)
	}
	if class := g.cfgRead(0x08, 4) >> 8; class != 0x020000 {
		t.Fatalf("class %#x, want ethernet", class)
	}
	if sv := g.cfgRead(0x2c, 2); sv != 0x1af4 {
		t.Fatalf("subsystem vendor %#x", sv)
	}
	if pin := g.cfgRead(0x3d, 1); pin != 0 {
		t.Fatalf("interrupt pin %d: the transport has no INTx", pin)
	}
	// __pci_read_base with decoding off
	cmd := g.cfgRead(0x04, 2)
	g.cfgWrite(0x04, 2, cmd&^2)
	lo, hi := g.cfgRead(0x10, 4), g.cfgRead(0x14, 4)
	g.cfgWrite(0x10, 4, 0xffffffff)
	g.cfgWrite(0x14, 4, 0xffffffff)
	size := ^(uint64(g.cfgRead(0x14, 4))<<32 | uint64(g.cfgRead(0x10, 4)&^0xf)) + 1
	g.cfgWrite(0x10, 4, lo)
	g.cfgWrite(0x14, 4, hi)
	g.cfgWrite(0x04, 2, cmd|2|4) // pci_enable_device + set_master
	if lo&0x6 != 0x4 || size != pci.BARSize {
		t.Fatalf("BAR0 low %#x size %#x: want a 64-bit BAR of %#x", lo, size, pci.BARSize)
	}
	g.bar = uint64(hi)<<32 | uint64(lo&^0xf)
	if g.bar != barAddr {
		t.Fatalf("BAR0 at %#x, want the VMM's %#x", g.bar, barAddr)
	}
	seen := map[uint32]bool{}
	for p := int(g.cfgRead(0x34, 1)); p != 0; p = int(g.cfgRead(p+1, 1)) {
		switch g.cfgRead(p, 1) {
		case 0x11:
			g.msixCap = p
			if n := g.cfgRead(p+2, 2)&0x7ff + 1; n != 3 {
				t.Fatalf("MSI-X table of %d entries, want 3 (two queues + config)", n)
			}
			g.msixTable = g.bar + uint64(g.cfgRead(p+4, 4)&^7)
			g.msixPBA = g.bar + uint64(g.cfgRead(p+8, 4)&^7)
			if g.cfgRead(p+4, 4)&7 != 0 || g.cfgRead(p+8, 4)&7 != 0 {
				t.Fatal("MSI-X table or PBA not in BAR 0")
			}
		case 0x09:
			typ, bar := g.cfgRead(p+3, 1), g.cfgRead(p+4, 1)
			off, length := uint64(g.cfgRead(p+8, 4)), g.cfgRead(p+12, 4)
			if bar != 0 || off+uint64(length) > size {
				t.Fatalf("virtio cap type %d: bar %d offset %#x length %#x", typ, bar, off, length)
			}
			seen[typ] = true
			switch typ {
			case 1:
				g.common = g.bar + off
				if length < 0x38 {
					t.Fatalf("common cfg length %#x", length)
				}
			case 2:
				g.notify = g.bar + off
				g.notifyMult = g.cfgRead(p+16, 4)
				if cl := g.cfgRead(p+2, 1); cl != 20 {
					t.Fatalf("notify cap_len %d, want 20", cl)
				}
			case 3:
				g.isr = g.bar + off
			case 4:
				g.devcfg = g.bar + off
			}
		}
	}
	for typ := uint32(1); typ <= 4; typ++ {
		if !seen[typ] {
			t.Fatalf("no virtio capability of type %d", typ)
		}
	}
	if g.msixCap == 0 || g.notifyMult != 4 {
		t.Fatalf("MSI-X cap at %#x, notify multiplier %d", g.msixCap, g.notifyMult)
	}
}

// enableMSIX does pci_alloc_irq_vectors: enable with the function masked,
// program every entry, unmask the function and each entry.
func (g *linuxGuest) enableMSIX() {
	ctrl := g.cfgRead(g.msixCap+2, 2)
	g.cfgWrite(g.msixCap+2, 2, ctrl|0x8000|0x4000)
	for i := uint64(0); i < 3; i++ {
		e := g.msixTable + 16*i
		g.write(e, 4, 0xfee00000)
		g.write(e+4, 4, 0)
		g.write(e+8, 4, 0x40+i)
		g.write(e+12, 4, 0) // unmask the entry
	}
	g.cfgWrite(g.msixCap+2, 2, (ctrl|0x8000)&^0x4000)
}

// negotiate does the status dance up to FEATURES_OK and reports whether
// the device accepted want.
func (g *linuxGuest) negotiate(want uint64) bool {
	g.setCC(0x14, 1, 0)
	if g.status() != 0 {
		g.t.Fatal("status is not 0 after reset")
	}
	g.setCC(0x14, 1, virtio.StatusAcknowledge)
	g.setCC(0x14, 1, virtio.StatusAcknowledge|virtio.StatusDriver)
	g.setCC(0x00, 4, 0)
	offered := g.cc(0x04, 4)
	g.setCC(0x00, 4, 1)
	offered |= g.cc(0x04, 4) << 32
	if offered != fakeFeatures {
		g.t.Fatalf("offered %#x, want exactly the device's %#x", offered, uint64(fakeFeatures))
	}
	g.setCC(0x08, 4, 0)
	g.setCC(0x0c, 4, want&0xffffffff)
	g.setCC(0x08, 4, 1)
	g.setCC(0x0c, 4, want>>32)
	g.setCC(0x14, 1, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK)
	return g.status()&virtio.StatusFeaturesOK != 0
}

// setupQueue does vp_modern's setup_vq and vp_active_vq for queue i.
func (g *linuxGuest) setupQueue(i uint16, r *virtiotest.Ring, vector uint16) {
	t := g.t
	g.setCC(0x16, 2, uint64(i))
	if max := g.cc(0x18, 2); max != 256 {
		t.Fatalf("queue %d max size %d, want 256", i, max)
	}
	if g.cc(0x1c, 2) != 0 {
		t.Fatalf("queue %d already enabled", i)
	}
	g.setCC(0x18, 2, uint64(r.Size))
	for _, a := range []struct {
		off  uint64
		addr uint64
	}{{0x20, r.DescAddr}, {0x28, r.AvailAddr}, {0x30, r.UsedAddr}} {
		g.setCC(a.off, 4, a.addr&0xffffffff) // vp_iowrite64_twopart
		g.setCC(a.off+4, 4, a.addr>>32)
	}
	g.setCC(0x1a, 2, uint64(vector))
	if got := g.cc(0x1a, 2); got != uint64(vector) {
		t.Fatalf("queue %d vector reads back %#x, want %d", i, got, vector)
	}
	off := g.cc(0x1e, 2)
	r.Notify = func() { g.kick(i, off) }
	g.setCC(0x1c, 2, 1)
}

// kick writes the queue index to the queue's notify address; where an
// ioeventfd is bound there, KVM would signal it instead of exiting.
func (g *linuxGuest) kick(i uint16, off uint64) {
	addr := g.notify + off*uint64(g.notifyMult)
	if g.hv.guestWrite(addr) {
		return
	}
	g.write(addr, 2, uint64(i))
}

// bringUp runs the whole Linux probe and returns the two rings, live.
func (g *linuxGuest) bringUp() (rx, tx *virtiotest.Ring) {
	g.probe()
	g.enableMSIX()
	want := uint64(virtio.FeatureVersion1 | virtio.FeatureEventIdx | 1<<5)
	if !g.negotiate(want) {
		g.t.Fatal("the device refused features it offered")
	}
	var err error
	if rx, err = g.drv.NewQueue(64, virtiotest.RingOptions{EventIdx: true, NoKickFD: true}); err != nil {
		g.t.Fatal(err)
	}
	if tx, err = g.drv.NewQueue(64, virtiotest.RingOptions{EventIdx: true, NoKickFD: true}); err != nil {
		g.t.Fatal(err)
	}
	g.setupQueue(0, rx, 1)
	g.setupQueue(1, tx, 2)
	g.setCC(0x10, 2, 0)
	if g.cc(0x10, 2) != 0 {
		g.t.Fatal("config vector did not stick")
	}
	if mac := g.read(g.devcfg, 4); mac != 0x12005452 {
		g.t.Fatalf("device config reads %#x", mac)
	}
	g.setCC(0x14, 1, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK)
	if g.status()&virtio.StatusDriverOK == 0 {
		g.t.Fatalf("status %#x after DRIVER_OK", g.status())
	}
	return rx, tx
}

func TestVirtioPCILinuxBringUpKickInterruptReset(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	rx, tx := g.bringUp()
	a := g.dev.last(t)
	if a.Features != virtio.FeatureVersion1|virtio.FeatureEventIdx|1<<5 {
		t.Fatalf("activated with features %#x", a.Features)
	}
	if len(a.Queues) != 2 || len(a.Kicks) != 2 || len(a.Interrupts) != 2 || a.Config == nil || a.Fail == nil {
		t.Fatalf("activation %+v", a)
	}
	for i, r := range []*virtiotest.Ring{rx, tx} {
		q := a.Queues[i]
		if q == nil || q.Size != 64 || q.DescAddr != r.DescAddr || q.AvailAddr != r.AvailAddr || q.UsedAddr != r.UsedAddr || !q.EventIdx || !q.Ready {
			t.Fatalf("queue %d = %+v", i, q)
		}
		if fd, ok := g.hv.ioeventfd(g.notify + 4*uint64(i)); !ok || fd != a.Kicks[i] {
			t.Fatalf("queue %d: ioeventfd %d (bound %v), kick fd %d", i, fd, ok, a.Kicks[i])
		}
	}

	// A tx chain, kicked through the ioeventfd, reaches the device's queue.
	a.Queues[1].EnableNotify()
	head, _ := tx.AddChain([][]byte{[]byte("frame")}, nil)
	if !tx.Kick() || !fdReadable(t, a.Kicks[1]) {
		t.Fatal("the kick did not reach the tx eventfd")
	}
	c, ok, err := a.Queues[1].Pop()
	if err != nil || !ok || c.Head != head {
		t.Fatalf("device Pop = %+v %v %v", c, ok, err)
	}
	if g.vp.Stats().ExitKicks != 0 {
		t.Fatal("an ioeventfd kick went through the VMM")
	}

	// The device interrupts through the queue's MSI vector.
	if err := a.Interrupts[1].Trigger(); err != nil {
		t.Fatal(err)
	}
	vec := g.hv.vectors
	if len(vec) != 3 {
		t.Fatalf("%d MSI vectors allocated, want 3", len(vec))
	}
	var hit *fakeVector
	for _, v := range vec {
		if addr, data, masked := v.Message(); v.Count() == 1 {
			hit = v
			if addr != 0xfee00000 || data != 0x42 || masked {
				t.Fatalf("vector message %#x %#x masked %v, want vector 2's", addr, data, masked)
			}
		}
	}
	if hit == nil {
		t.Fatal("no MSI vector fired")
	}

	// Reset frees everything.
	kicks := append([]int(nil), a.Kicks...)
	g.setCC(0x14, 1, 0)
	if g.status() != 0 || g.dev.resets != 1 {
		t.Fatalf("after reset: status %#x, device resets %d", g.status(), g.dev.resets)
	}
	if len(g.hv.ioevents) != 0 {
		t.Fatalf("ioeventfds left after reset: %v", g.hv.ioevents)
	}
	for _, fd := range kicks {
		if !fdClosed(fd) {
			t.Fatalf("kick eventfd %d still open after reset", fd)
		}
	}
	for i, v := range vec {
		if !v.closed {
			t.Fatalf("MSI vector %d not closed at reset", i)
		}
	}
	g.setCC(0x16, 2, 0)
	if g.cc(0x1c, 2) != 0 || g.cc(0x18, 2) != 256 || g.cc(0x1a, 2) != pci.MSINoVector || g.cc(0x20, 8) != 0 {
		t.Fatal("queue registers survived the reset")
	}

	// And the driver can bring the device up again.
	g.drv = virtiotest.New(4 << 20)
	g.bringUpAgain()
}

// bringUpAgain repeats negotiation and queue setup without re-probing.
func (g *linuxGuest) bringUpAgain() {
	if !g.negotiate(virtio.FeatureVersion1) {
		g.t.Fatal("renegotiation refused")
	}
	rx, _ := g.drv.NewQueue(64, virtiotest.RingOptions{NoKickFD: true})
	tx, _ := g.drv.NewQueue(64, virtiotest.RingOptions{NoKickFD: true})
	g.setupQueue(0, rx, 1)
	g.setupQueue(1, tx, 2)
	g.setCC(0x14, 1, 0xf)
	if len(g.dev.activations) != 2 {
		g.t.Fatalf("%d activations, want 2", len(g.dev.activations))
	}
}

func TestVirtioPCIExitNotify(t *testing.T) {
	g := newGuest(t, pci.NotifyExit)
	_, tx := g.bringUp()
	if len(g.hv.ioevents) != 0 {
		t.Fatal("exit mode bound ioeventfds")
	}
	a := g.dev.last(t)
	tx.AddChain([][]byte{[]byte("x")}, nil)
	tx.ForceKick()
	if !fdReadable(t, a.Kicks[1]) || fdReadable(t, a.Kicks[0]) {
		t.Fatal("a trapped kick of queue 1 did not signal exactly its eventfd")
	}
	if s := g.vp.Stats(); s.ExitKicks != 1 || s.EarlyKicks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestVirtioPCIEarlyKickIgnored(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.probe()
	g.write(g.notify, 2, 0)
	g.write(g.notify+4, 2, 1)
	g.write(g.notify+400, 2, 100) // no such queue
	if s := g.vp.Stats(); s.EarlyKicks != 3 {
		t.Fatalf("early kicks %d, want 3", s.EarlyKicks)
	}
}

func TestVirtioPCIFeatureNegotiation(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.probe()
	if g.negotiate(virtio.FeatureVersion1 | 1<<40) {
		t.Fatal("FEATURES_OK with a feature the device did not offer")
	}
	if g.negotiate(virtio.FeatureEventIdx) {
		t.Fatal("FEATURES_OK without VERSION_1")
	}
	if !g.negotiate(virtio.FeatureVersion1) {
		t.Fatal("FEATURES_OK refused for VERSION_1 alone")
	}
	// Features are frozen after FEATURES_OK.
	g.setCC(0x08, 4, 0)
	g.setCC(0x0c, 4, 1<<5)
	if g.cc(0x0c, 4) != 0 {
		t.Fatal("driver features changed after FEATURES_OK")
	}
	// DRIVER_OK without FEATURES_OK is refused.
	g.negotiate(virtio.FeatureVersion1 | 1<<40)
	g.setCC(0x14, 1, 0x7)
	if g.status()&virtio.StatusDriverOK != 0 || len(g.dev.activations) != 0 {
		t.Fatal("DRIVER_OK accepted without FEATURES_OK")
	}
}

func TestVirtioPCIBadQueueSetup(t *testing.T) {
	for name, bad := range map[string]func(g *linuxGuest){
		"size not a power of 2": func(g *linuxGuest) { g.setCC(0x18, 2, 100) },
		"size above max":        func(g *linuxGuest) { g.setCC(0x18, 2, 512) },
		"misaligned desc":       func(g *linuxGuest) { g.setCC(0x20, 4, 0x1008) },
	} {
		t.Run(name, func(t *testing.T) {
			g := newGuest(t, pci.NotifyIoeventfd)
			g.probe()
			g.enableMSIX()
			g.negotiate(virtio.FeatureVersion1)
			g.setCC(0x16, 2, 0)
			g.setCC(0x18, 2, 64)
			bad(g)
			g.setCC(0x1c, 2, 1)
			if g.cc(0x1c, 2) != 0 || g.status()&virtio.StatusNeedsReset == 0 {
				t.Fatalf("bad queue enabled=%d status %#x; want refused with NEEDS_RESET", g.cc(0x1c, 2), g.status())
			}
			g.setCC(0x14, 1, 0xf)
			if g.status()&virtio.StatusDriverOK != 0 || len(g.dev.activations) != 0 {
				t.Fatal("DRIVER_OK accepted on a device that needs reset")
			}
			if len(g.logs) != 1 {
				t.Fatalf("%d log lines, want 1", len(g.logs))
			}
		})
	}
}

func TestVirtioPCIVectors(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.probe()
	g.negotiate(virtio.FeatureVersion1)
	g.setCC(0x16, 2, 0)
	g.setCC(0x1a, 2, 7) // beyond the 3-entry table
	if g.cc(0x1a, 2) != pci.MSINoVector {
		t.Fatal("an out-of-range vector did not read back as NO_VECTOR")
	}
	g.hv.noVectors = true
	g.setCC(0x1a, 2, 1)
	if g.cc(0x1a, 2) != pci.MSINoVector {
		t.Fatal("a vector the hypervisor could not allocate did not read back as NO_VECTOR")
	}
	g.hv.noVectors = false
	g.setCC(0x1a, 2, 1)
	if g.cc(0x1a, 2) != 1 || len(g.hv.vectors) != 1 {
		t.Fatal("vector 1 not allocated")
	}
	v := g.hv.vectors[0]
	if _, _, masked := v.Message(); !masked {
		t.Fatal("vector live before MSI-X is enabled")
	}
	g.enableMSIX()
	if addr, data, masked := v.Message(); masked || addr != 0xfee00000 || data != 0x41 {
		t.Fatalf("vector message %#x %#x masked %v", addr, data, masked)
	}
}

// TestVirtioPCIMaskedVectorPending: a trigger while masked sets the PBA
// bit and is delivered at unmask.
func TestVirtioPCIMaskedVectorPending(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.bringUp()
	a := g.dev.last(t)
	g.write(g.msixTable+16*2+12, 4, 1) // mask vector 2 (tx)
	a.Interrupts[1].Trigger()
	var v *fakeVector
	for _, x := range g.hv.vectors {
		if _, data, _ := x.Message(); data == 0x42 {
			v = x
		}
	}
	if v.Count() != 0 {
		t.Fatal("a masked vector fired")
	}
	if pba := g.read(g.msixPBA, 8); pba != 1<<2 {
		t.Fatalf("PBA = %#x, want bit 2", pba)
	}
	g.write(g.msixTable+16*2+12, 4, 0)
	if v.Count() != 1 || g.read(g.msixPBA, 8) != 0 {
		t.Fatalf("after unmask: %d deliveries, PBA %#x", v.Count(), g.read(g.msixPBA, 8))
	}
	// The function mask works the same way.
	ctrl := g.cfgRead(g.msixCap+2, 2)
	g.cfgWrite(g.msixCap+2, 2, ctrl|0x4000)
	a.Interrupts[1].Trigger()
	g.cfgWrite(g.msixCap+2, 2, ctrl)
	if v.Count() != 2 {
		t.Fatalf("%d deliveries after the function mask, want 2", v.Count())
	}
}

// TestVirtioPCIFail: the device reporting a broken queue sets NEEDS_RESET,
// sets the ISR config bit, raises the config vector and logs once.
func TestVirtioPCIFail(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.bringUp()
	a := g.dev.last(t)
	a.Fail(errors.New("chain loops"))
	a.Fail(errors.New("again"))
	if g.status()&virtio.StatusNeedsReset == 0 {
		t.Fatalf("status %#x lacks NEEDS_RESET", g.status())
	}
	var cfgVec *fakeVector
	for _, x := range g.hv.vectors {
		if _, data, _ := x.Message(); data == 0x40 {
			cfgVec = x
		}
	}
	if cfgVec == nil || cfgVec.Count() != 1 {
		t.Fatal("the config vector did not fire exactly once")
	}
	if isr := g.read(g.isr, 1); isr != 2 {
		t.Fatalf("ISR = %#x, want the config bit", isr)
	}
	if isr := g.read(g.isr, 1); isr != 0 {
		t.Fatalf("ISR = %#x on the second read, want cleared", isr)
	}
	if len(g.logs) != 1 {
		t.Fatalf("%d log lines, want 1", len(g.logs))
	}
	// After a reset a stale Fail from the old activation is ignored.
	g.setCC(0x14, 1, 0)
	a.Fail(errors.New("late"))
	if g.status() != 0 {
		t.Fatal("a Fail from before the reset changed the status")
	}
	if g.vp.Stats().Failures != 2 {
		t.Fatalf("failures = %d, want 2", g.vp.Stats().Failures)
	}
}

func TestVirtioPCIActivateError(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.dev.activateErr = errors.New("tap is gone")
	g.bringUpWithoutCheck()
	if g.status()&virtio.StatusNeedsReset == 0 || g.status()&virtio.StatusDriverOK == 0 {
		t.Fatalf("status %#x, want DRIVER_OK|NEEDS_RESET", g.status())
	}
	if len(g.hv.ioevents) != 0 {
		t.Fatal("ioeventfds left bound after the activation failed")
	}
	g.write(g.notify, 2, 0)
	if g.vp.Stats().EarlyKicks != 1 {
		t.Fatal("a kick to a device that failed to start was not ignored")
	}
}

func (g *linuxGuest) bringUpWithoutCheck() {
	g.probe()
	g.enableMSIX()
	g.negotiate(virtio.FeatureVersion1)
	rx, _ := g.drv.NewQueue(64, virtiotest.RingOptions{NoKickFD: true})
	tx, _ := g.drv.NewQueue(64, virtiotest.RingOptions{NoKickFD: true})
	g.setupQueue(0, rx, 1)
	g.setupQueue(1, tx, 2)
	g.setCC(0x14, 1, 0xf)
}

// TestVirtioPCIBARMoveAfterDriverOK: the guest moves BAR 0; the registers
// and the ioeventfds follow.
func TestVirtioPCIBARMoveAfterDriverOK(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.bringUp()
	a := g.dev.last(t)
	const newBar = 0xd0000000
	cmd := g.cfgRead(0x04, 2)
	g.cfgWrite(0x04, 2, cmd&^2)
	g.cfgWrite(0x10, 4, newBar|0xc)
	g.cfgWrite(0x04, 2, cmd)
	if _, ok := g.hv.ioeventfd(g.notify); ok {
		t.Fatal("ioeventfd left at the old notify address")
	}
	if fd, ok := g.hv.ioeventfd(newBar + (g.notify - g.bar) + 4); !ok || fd != a.Kicks[1] {
		t.Fatal("no ioeventfd at the new notify address")
	}
	if g.read(newBar+(g.common-g.bar)+0x14, 1)&virtio.StatusDriverOK == 0 {
		t.Fatal("common config not readable at the new BAR address")
	}
	var d [1]byte
	if g.mmio.Read(g.common, d[:]) {
		t.Fatal("the old BAR address still decodes")
	}
}

// TestVirtioPCIIoeventfdFallback: where KVM refuses any-length ioeventfds
// the transport binds 16-bit ones.
func TestVirtioPCIIoeventfdFallback(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.hv.anyLenErr = true
	g.bringUp()
	if len(g.hv.ioevents) != 2 || g.hv.sizes[0] != 2 {
		t.Fatalf("ioeventfds %v sizes %v", g.hv.ioevents, g.hv.sizes)
	}
}

// TestVirtioPCIHostileRegisterAccess throws odd sizes and offsets at every
// block: nothing may panic.
func TestVirtioPCIHostileRegisterAccess(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.probe()
	for off := uint64(0); off < pci.BARSize; off += 0x3f9 {
		for _, size := range []int{1, 2, 3, 4, 8} {
			var d [8]byte
			g.mmio.Read(g.bar+off, d[:size])
			for i := range d {
				d[i] = 0xff
			}
			g.mmio.Write(g.bar+off, d[:size])
		}
	}
	for reg := 0; reg < 256; reg++ {
		g.cfgRead(reg, 1)
		g.cfgWrite(reg, 1, 0xff)
	}
}

// TestVirtioPCICfgCapability reaches the BAR through the PCI_CFG window in
// config space, as firmware does before it maps BARs.
func TestVirtioPCICfgCapability(t *testing.T) {
	g := newGuest(t, pci.NotifyIoeventfd)
	g.probe()
	p := 0
	for q := int(g.cfgRead(0x34, 1)); q != 0; q = int(g.cfgRead(q+1, 1)) {
		if g.cfgRead(q, 1) == 0x09 && g.cfgRead(q+3, 1) == 5 {
			p = q
		}
	}
	if p == 0 {
		t.Fatal("no VIRTIO_PCI_CAP_PCI_CFG capability")
	}
	g.cfgWrite(p+4, 1, 0)    // bar
	g.cfgWrite(p+8, 4, 0x12) // offset: num_queues
	g.cfgWrite(p+12, 4, 2)   // length
	if n := g.cfgRead(p+16, 2); n != 2 {
		t.Fatalf("num_queues through PCI_CFG = %d, want 2", n)
	}
	g.cfgWrite(p+8, 4, 0x14) // device_status
	g.cfgWrite(p+12, 4, 1)
	g.cfgWrite(p+16, 1, virtio.StatusAcknowledge)
	if g.status() != virtio.StatusAcknowledge {
		t.Fatalf("status %#x after a PCI_CFG write", g.status())
	}
	g.cfgWrite(p+12, 4, 3) // an invalid length does nothing
	g.cfgWrite(p+16, 4, 0)
	if g.status() != virtio.StatusAcknowledge {
		t.Fatal("an invalid PCI_CFG length reached the BAR")
	}
}
