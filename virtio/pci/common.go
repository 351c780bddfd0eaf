package pci

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// Common configuration structure offsets (virtio 1.2, 4.1.4.3).
const (
	ccDeviceFeatureSelect = 0x00
	ccDeviceFeature       = 0x04
	ccDriverFeatureSelect = 0x08
	ccDriverFeature       = 0x0c
	ccConfigMSIXVector    = 0x10
	ccNumQueues           = 0x12
	ccDeviceStatus        = 0x14
	ccConfigGeneration    = 0x15
	ccQueueSelect         = 0x16
	ccQueueSize           = 0x18
	ccQueueMSIXVector     = 0x1a
	ccQueueEnable         = 0x1c
	ccQueueNotifyOff      = 0x1e
	ccQueueDesc           = 0x20
	ccQueueDriver         = 0x28
	ccQueueDevice         = 0x30
)

// renderCommonLocked lays the common configuration out as the guest sees
// it, for the queue currently selected.
func (t *Transport) renderCommonLocked(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[ccDeviceFeatureSelect:], t.devFeatSel)
	if t.devFeatSel < 2 {
		le.PutUint32(b[ccDeviceFeature:], uint32(t.offered>>(32*t.devFeatSel)))
	}
	le.PutUint32(b[ccDriverFeatureSelect:], t.drvFeatSel)
	if t.drvFeatSel < 2 {
		le.PutUint32(b[ccDriverFeature:], uint32(t.drvFeatures>>(32*t.drvFeatSel)))
	}
	le.PutUint16(b[ccConfigMSIXVector:], t.configVec)
	le.PutUint16(b[ccNumQueues:], uint16(len(t.queues)))
	b[ccDeviceStatus] = uint8(t.status.Load())
	b[ccConfigGeneration] = 0 // the device config never changes under the driver
	le.PutUint16(b[ccQueueSelect:], t.queueSel)
	if q := t.selectedLocked(); q != nil {
		le.PutUint16(b[ccQueueSize:], q.size)
		le.PutUint16(b[ccQueueMSIXVector:], q.vector)
		if q.enabled {
			le.PutUint16(b[ccQueueEnable:], 1)
		}
		le.PutUint16(b[ccQueueNotifyOff:], t.queueSel)
		le.PutUint64(b[ccQueueDesc:], q.desc)
		le.PutUint64(b[ccQueueDriver:], q.driver)
		le.PutUint64(b[ccQueueDevice:], q.device)
	} else {
		le.PutUint16(b[ccQueueMSIXVector:], MSINoVector) // queue_size 0: no such queue
	}
}

func (t *Transport) selectedLocked() *pciQueue {
	if int(t.queueSel) < len(t.queues) {
		return &t.queues[t.queueSel]
	}
	return nil
}

func (t *Transport) commonRead(off uint64, data []byte) {
	var b [commonCfgLen]byte
	t.renderCommonLocked(b[:])
	readWindow(b[:], off, data)
}

// commonWrite merges the access into the rendered structure and applies
// each field it touched, so any access width works (Linux writes the
// 64-bit addresses as two 32-bit halves).
func (t *Transport) commonWrite(off uint64, data []byte) {
	if off >= commonCfgLen || off+uint64(len(data)) > commonCfgLen {
		return
	}
	var b [commonCfgLen]byte
	t.renderCommonLocked(b[:])
	copy(b[off:], data)
	end := off + uint64(len(data))
	touches := func(field, size uint64) bool { return off < field+size && field < end }
	le := binary.LittleEndian
	featuresOpen := t.status.Load()&virtio.StatusFeaturesOK == 0
	live := t.status.Load()&virtio.StatusDriverOK != 0

	if touches(ccDeviceFeatureSelect, 4) {
		t.devFeatSel = le.Uint32(b[ccDeviceFeatureSelect:])
	}
	if touches(ccDriverFeatureSelect, 4) {
		t.drvFeatSel = le.Uint32(b[ccDriverFeatureSelect:])
	}
	if touches(ccDriverFeature, 4) && featuresOpen && t.drvFeatSel < 2 {
		shift := 32 * t.drvFeatSel
		t.drvFeatures = t.drvFeatures&^(0xffffffff<<shift) | uint64(le.Uint32(b[ccDriverFeature:]))<<shift
	}
	if touches(ccConfigMSIXVector, 2) {
		t.configVec = t.useVectorLocked(le.Uint16(b[ccConfigMSIXVector:]))
	}
	if touches(ccQueueSelect, 2) {
		t.queueSel = le.Uint16(b[ccQueueSelect:])
	}
	if q := t.selectedLocked(); q != nil && !live {
		if touches(ccQueueMSIXVector, 2) {
			q.vector = t.useVectorLocked(le.Uint16(b[ccQueueMSIXVector:]))
		}
		if !q.enabled { // the ring's layout is fixed once enabled
			if touches(ccQueueSize, 2) {
				q.size = le.Uint16(b[ccQueueSize:])
			}
			if touches(ccQueueDesc, 8) {
				q.desc = le.Uint64(b[ccQueueDesc:])
			}
			if touches(ccQueueDriver, 8) {
				q.driver = le.Uint64(b[ccQueueDriver:])
			}
			if touches(ccQueueDevice, 8) {
				q.device = le.Uint64(b[ccQueueDevice:])
			}
			if touches(ccQueueEnable, 2) && le.Uint16(b[ccQueueEnable:]) == 1 {
				t.enableQueueLocked(q)
			}
		}
	}
	if touches(ccDeviceStatus, 1) {
		t.writeStatusLocked(b[ccDeviceStatus])
	}
}

// enableQueueLocked checks the queue's size and ring alignment before the
// driver may use it; a bad one marks the device as needing reset.
func (t *Transport) enableQueueLocked(q *pciQueue) {
	n := q.size
	switch {
	case n == 0 || n > q.maxSize || n&(n-1) != 0:
		t.brokenLocked(fmt.Errorf("queue %d: size %d is not a power of 2 up to %d", t.queueSel, n, q.maxSize))
	case q.desc%16 != 0 || q.driver%2 != 0 || q.device%4 != 0:
		t.brokenLocked(fmt.Errorf("queue %d: misaligned rings (desc %#x, driver %#x, device %#x)", t.queueSel, q.desc, q.driver, q.device))
	default:
		q.enabled = true
	}
}

// writeStatusLocked runs the device status state machine.
func (t *Transport) writeStatusLocked(v uint8) {
	if v == 0 {
		t.resetLocked()
		return
	}
	old := uint8(t.status.Load())
	if v&virtio.StatusFeaturesOK != 0 && old&virtio.StatusFeaturesOK == 0 {
		if extra := t.drvFeatures &^ t.offered; extra != 0 || t.drvFeatures&virtio.FeatureVersion1 == 0 {
			t.opts.Logf("virtio-pci: refusing features %#x (offered %#x; VERSION_1 is required)", t.drvFeatures, t.offered)
			v &^= virtio.StatusFeaturesOK
		}
	}
	if v&virtio.StatusDriverOK != 0 && old&virtio.StatusDriverOK == 0 {
		if v&virtio.StatusFeaturesOK == 0 || old&virtio.StatusNeedsReset != 0 {
			v &^= virtio.StatusDriverOK
		} else if err := t.activateLocked(); err != nil {
			t.failures.Add(1)
			t.logFailure("virtio-pci: device %#x failed to start: %v", virtioPCIDeviceBase+t.dev.Type(), err)
			v |= virtio.StatusNeedsReset
		}
	}
	for {
		cur := t.status.Load()
		if t.status.CompareAndSwap(cur, uint32(v)|cur&virtio.StatusNeedsReset) {
			break
		}
	}
	if v&virtio.StatusNeedsReset != 0 {
		t.raiseConfigLocked()
	}
}

// brokenLocked marks the device as needing reset from the vCPU side.
func (t *Transport) brokenLocked(err error) {
	t.failures.Add(1)
	t.logFailure("virtio-pci: device %#x needs reset: %v", virtioPCIDeviceBase+t.dev.Type(), err)
	t.status.Or(virtio.StatusNeedsReset)
	t.raiseConfigLocked()
}

func (t *Transport) raiseConfigLocked() {
	t.isr.Or(isrConfig)
	if v := t.msix.vector(t.configVec); v != nil {
		v.Trigger()
	}
}

// activateLocked builds the queues and kick eventfds, binds the
// ioeventfds and starts the device.
func (t *Transport) activateLocked() error {
	gen := t.generation.Add(1)
	a := &pciActivation{}
	var config virtio.Interrupt
	if v := t.msix.vector(t.configVec); v != nil {
		config = v
	}
	act := virtio.Activation{
		Mem:      t.mem,
		Features: t.drvFeatures,
		Config:   config,
		Fail:     func(err error) { t.fail(gen, config, err) },
	}
	for _, pq := range t.queues {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.releaseLocked(a)
			return fmt.Errorf("kick eventfd: %w", err)
		}
		a.kicks = append(a.kicks, fd)
		var q *virtio.Queue
		if pq.enabled {
			q = &virtio.Queue{
				Size: pq.size, MaxSize: pq.maxSize, DescAddr: pq.desc, AvailAddr: pq.driver, UsedAddr: pq.device,
				Ready: true, EventIdx: t.drvFeatures&virtio.FeatureEventIdx != 0,
				Indirect: t.drvFeatures&virtio.FeatureIndirectDesc != 0, Mem: t.mem,
			}
		}
		var irq virtio.Interrupt
		if v := t.msix.vector(pq.vector); v != nil {
			irq = v
		}
		act.Queues = append(act.Queues, q)
		act.Interrupts = append(act.Interrupts, irq)
	}
	act.Kicks = a.kicks
	if t.opts.Notify == NotifyIoeventfd {
		t.addIoeventfdsLocked(a)
	}
	t.active = a
	if err := t.dev.Activate(act); err != nil {
		t.releaseLocked(a)
		t.active = nil
		return err
	}
	a.activated = true
	return nil
}

// kickLocked forwards a trapped notify write for queue i.
func (t *Transport) kickLocked(i uint64) {
	a := t.active
	if a == nil || !a.activated || i >= uint64(len(a.kicks)) {
		t.earlyKicks.Add(1)
		return
	}
	t.exitKicks.Add(1)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(a.kicks[i], one[:]) // EAGAIN only when the counter is full: the device has a kick pending anyway
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// readWindow copies the bytes of b at off into data; bytes past b read 0.
func readWindow(b []byte, off uint64, data []byte) {
	for i := range data {
		data[i] = 0
		if o := off + uint64(i); o < uint64(len(b)) {
			data[i] = b[o]
		}
	}
}
