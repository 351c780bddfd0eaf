// Package pci is the virtio-pci modern transport (virtio 1.2, section
// 4.1): one PCI function whose 64-bit BAR 0 holds every register block,
// announced by vendor capabilities, with MSI-X for interrupts. A guest kick
// reaches the device through an ioeventfd (or, in NotifyExit mode, a
// trapped write that the transport turns into the same eventfd signal); the
// device signals the guest through the MSIVectors the Hypervisor gives out.
//
// The PCI config space and the host bridge it sits behind are devices/.
package pci

import (
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"tinyvmm/devices"
	"tinyvmm/virtio"
)

// MSINoVector is VIRTIO_MSI_NO_VECTOR: no interrupt for this event.
const MSINoVector = 0xffff

// BAR 0 layout: one page per register block.
const (
	BARSize = 0x8000

	barCommon    = 0x0000
	barISR       = 0x1000
	barDevice    = 0x2000
	barNotify    = 0x3000
	barMSIXTable = 0x4000
	barMSIXPBA   = 0x5000
	barBlock     = 0x1000

	commonCfgLen         = 0x38
	notifyOffMultiplier  = 4
	maxVirtioPCIQueues   = barBlock/16 - 1 // an MSI-X entry each, plus config
	virtioPCIVendor      = 0x1af4
	virtioPCIDeviceBase  = 0x1040
	virtioPCISubsysID    = 0x1100
	failureLogInterval   = 10 * time.Second
	ioeventfdAnyLength   = 0
	ioeventfdFallbackLen = 2 // Linux writes the queue index as 16 bits
)

// NotifyMode says how a guest kick reaches the device.
type NotifyMode int

const (
	// NotifyIoeventfd registers an ioeventfd at each queue's notify
	// address: KVM signals the kick eventfd, no exit to the VMM.
	NotifyIoeventfd NotifyMode = iota
	// NotifyExit leaves the notify region trapped: each kick is a vCPU
	// exit, and the transport signals the kick eventfd itself
	// (--notify=exit, for comparison).
	NotifyExit
)

// String is the mode's name: "ioeventfd" or "exit".
func (m NotifyMode) String() string {
	switch m {
	case NotifyIoeventfd:
		return "ioeventfd"
	case NotifyExit:
		return "exit"
	}
	return fmt.Sprintf("NotifyMode(%d)", int(m))
}

// ParseNotifyMode parses a mode's name.
func ParseNotifyMode(s string) (NotifyMode, error) {
	for _, m := range []NotifyMode{NotifyIoeventfd, NotifyExit} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%q is not one of ioeventfd, exit", s)
}

// Options configure a transport.
type Options struct {
	// BARAddr is where the VMM puts BAR 0 (BARSize bytes,
	// aligned to its size), as firmware would; the guest may move it.
	BARAddr uint64
	Notify  NotifyMode
	// SubsysID overrides the PCI subsystem ID (default 0x1100, QEMU's).
	SubsysID uint16
	// Logf receives the transport's rare messages (default log.Printf).
	Logf func(format string, args ...any)
}

// Stats are the transport's counters.
type Stats struct {
	EarlyKicks uint64 // kicks before DRIVER_OK, ignored
	ExitKicks  uint64 // kicks that trapped to the VMM and were forwarded
	Failures   uint64 // virtio.Activation.Fail calls and failed activations
}

// Transport is one virtio device behind the modern virtio-pci transport.
type Transport struct {
	dev  virtio.Device
	hv   Hypervisor
	mem  virtio.Memory
	opts Options
	cfg  *devices.PCIConfig

	mu          sync.Mutex
	offered     uint64
	devFeatSel  uint32
	drvFeatSel  uint32
	drvFeatures uint64
	configVec   uint16
	queueSel    uint16
	queues      []pciQueue
	barAddr     uint64
	barMapped   bool
	msix        msixState
	msixCap     uint8
	pciCfgCap   uint8
	active      *pciActivation

	status     atomic.Uint32 // device_status; Fail sets NEEDS_RESET from the worker
	isr        atomic.Uint32
	generation atomic.Uint64 // bumped at every activation and reset; stale Fails are ignored

	earlyKicks, exitKicks, failures atomic.Uint64
	lastLog                         atomic.Int64 // unix nanoseconds of the last failure logged
}

// pciQueue is the driver's configuration of one queue.
type pciQueue struct {
	size, maxSize        uint16
	vector               uint16
	enabled              bool
	desc, driver, device uint64
}

// pciActivation is what exists between DRIVER_OK and reset.
type pciActivation struct {
	kicks     []int
	ioevents  []ioeventReg
	activated bool // virtio.Device.Activate succeeded
}

type ioeventReg struct {
	gpa  uint64
	size uint32
	fd   int
}

// New puts dev behind a virtio-pci function with BAR 0 at
// opts.BARAddr. Add PCI() to a devices.PCIBus to make it visible.
func New(dev virtio.Device, hv Hypervisor, mem virtio.Memory, opts Options) (*Transport, error) {
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	if opts.SubsysID == 0 {
		opts.SubsysID = virtioPCISubsysID
	}
	n := len(dev.QueueMaxSizes())
	if n == 0 || n > maxVirtioPCIQueues {
		return nil, fmt.Errorf("virtio-pci: %d queues (want 1 to %d)", n, maxVirtioPCIQueues)
	}
	t := &Transport{dev: dev, hv: hv, mem: mem, opts: opts, offered: dev.Features() | virtio.FeatureVersion1}
	t.cfg = devices.NewPCIConfig(devices.PCIHeader{
		VendorID: virtioPCIVendor, DeviceID: virtioPCIDeviceBase + dev.Type(), Revision: 1,
		Class: virtioClass(dev.Type()), SubsysVendorID: virtioPCIVendor, SubsysID: opts.SubsysID,
	})
	t.cfg.Errorf = opts.Logf
	if err := t.cfg.AddBAR64(0, opts.BARAddr, devices.PCIBAR{Size: BARSize, Prefetch: true, Dev: (*virtioBAR)(t), Moved: t.barMoved}); err != nil {
		return nil, fmt.Errorf("virtio-pci: %v", err)
	}
	if err := t.addCapabilities(n); err != nil {
		return nil, err
	}
	t.msix.init(n + 1)
	t.cfg.OnWrite = t.configWritten
	t.cfg.OnRead = t.configRead
	t.resetLocked()
	t.cfg.SetMemoryEnabled(true)
	return t, nil
}

// virtioClass is the PCI class code Linux and QEMU use for a device type.
func virtioClass(typ uint16) uint32 {
	switch typ {
	case 1:
		return 0x020000 // network, ethernet
	case 2:
		return 0x018000 // storage, other
	default:
		return 0xff0000
	}
}

// PCI returns the function's config space, for devices.PCIBus.Add.
func (t *Transport) PCI() *devices.PCIConfig { return t.cfg }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{EarlyKicks: t.earlyKicks.Load(), ExitKicks: t.exitKicks.Load(), Failures: t.failures.Load()}
}

// Close resets the device and frees everything the transport holds.
func (t *Transport) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
	t.msix.closeVectors()
}

// Status returns device_status.
func (t *Transport) Status() uint8 { return uint8(t.status.Load()) }

// resetLocked is a device reset (status 0): it stops the device, then
// frees the kick eventfds, ioeventfds and MSI vectors, and returns every
// register to its initial value.
func (t *Transport) resetLocked() {
	t.generation.Add(1)
	if a := t.active; a != nil {
		if a.activated {
			t.dev.Reset()
		}
		t.releaseLocked(a)
		t.active = nil
	}
	t.msix.closeVectors()
	sizes := t.dev.QueueMaxSizes()
	t.queues = make([]pciQueue, len(sizes))
	for i, max := range sizes {
		t.queues[i] = pciQueue{size: max, maxSize: max, vector: MSINoVector}
	}
	t.devFeatSel, t.drvFeatSel, t.drvFeatures, t.queueSel = 0, 0, 0, 0
	t.configVec = MSINoVector
	t.isr.Store(0)
	t.status.Store(0)
}

// releaseLocked undoes an activation's ioeventfds and eventfds.
func (t *Transport) releaseLocked(a *pciActivation) {
	t.removeIoeventfdsLocked(a)
	for _, fd := range a.kicks {
		closeFD(fd)
	}
	a.kicks = nil
}

// barMoved is the devices.PCIConfig's report that BAR 0 was mapped or unmapped;
// the notify ioeventfds follow it.
func (t *Transport) barMoved(addr uint64, mapped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.barAddr, t.barMapped = addr, mapped
	if a := t.active; a != nil && t.opts.Notify == NotifyIoeventfd {
		t.removeIoeventfdsLocked(a)
		if mapped {
			t.addIoeventfdsLocked(a)
		}
	}
}

// addIoeventfdsLocked binds each queue's notify address to its kick
// eventfd, for writes of any length, or of 16 bits where KVM lacks that.
// A queue whose binding fails still works through trapped writes.
func (t *Transport) addIoeventfdsLocked(a *pciActivation) {
	if !t.barMapped {
		return
	}
	for i, fd := range a.kicks {
		gpa := t.barAddr + barNotify + uint64(i)*notifyOffMultiplier
		size := uint32(ioeventfdAnyLength)
		err := t.hv.AddIoeventfd(gpa, size, fd)
		if err != nil {
			size = ioeventfdFallbackLen
			err = t.hv.AddIoeventfd(gpa, size, fd)
		}
		if err != nil {
			t.opts.Logf("virtio-pci: queue %d kicks will exit to the VMM: %v", i, err)
			continue
		}
		a.ioevents = append(a.ioevents, ioeventReg{gpa, size, fd})
	}
}

func (t *Transport) removeIoeventfdsLocked(a *pciActivation) {
	for _, r := range a.ioevents {
		if err := t.hv.RemoveIoeventfd(r.gpa, r.size, r.fd); err != nil {
			t.opts.Logf("virtio-pci: %v", err)
		}
	}
	a.ioevents = nil
}

// fail is virtio.Activation.Fail: the device found the guest broke a queue. It
// runs on the device's worker, so it takes no lock: the reset path holds
// the lock while it waits for that worker to stop.
func (t *Transport) fail(gen uint64, config virtio.Interrupt, err error) {
	if t.generation.Load() != gen {
		return // a failure from before the last reset
	}
	t.failures.Add(1)
	for {
		old := t.status.Load()
		if old&virtio.StatusNeedsReset != 0 {
			return // already reported for this activation
		}
		if t.status.CompareAndSwap(old, old|virtio.StatusNeedsReset) {
			break
		}
	}
	t.logFailure("virtio-pci: device %#x needs reset: %v", virtioPCIDeviceBase+t.dev.Type(), err)
	t.isr.Or(isrConfig)
	if config != nil {
		config.Trigger()
	}
}

// logFailure logs at most once per failureLogInterval, so a guest that
// breaks its device in a loop cannot flood the log.
func (t *Transport) logFailure(format string, args ...any) {
	now := time.Now().UnixNano()
	last := t.lastLog.Load()
	if last != 0 && now-last < int64(failureLogInterval) {
		return
	}
	if t.lastLog.CompareAndSwap(last, now) {
		t.opts.Logf(format, args...)
	}
}
