package pci_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtio/virtiotest"
)

// fakeHV is a pci.Hypervisor that records ioeventfds and hands out
// counting MSI vectors.
type fakeHV struct {
	mu        sync.Mutex
	ioevents  map[uint64]int // gpa -> eventfd
	vectors   []*fakeVector
	noVectors bool
	anyLenErr bool // refuse ioeventfds of any length (old KVM)
	sizes     []uint32
}

func newFakeHV() *fakeHV { return &fakeHV{ioevents: map[uint64]int{}} }

func (h *fakeHV) AddIoeventfd(gpa uint64, size uint32, fd int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if size == 0 && h.anyLenErr {
		return errors.New("KVM_IOEVENTFD: invalid argument")
	}
	if _, dup := h.ioevents[gpa]; dup {
		return errors.New("KVM_IOEVENTFD: file exists")
	}
	h.ioevents[gpa] = fd
	h.sizes = append(h.sizes, size)
	return nil
}

func (h *fakeHV) RemoveIoeventfd(gpa uint64, size uint32, fd int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ioevents[gpa] != fd {
		return errors.New("KVM_IOEVENTFD deassign: no such binding")
	}
	delete(h.ioevents, gpa)
	return nil
}

func (h *fakeHV) NewMSIVector() (pci.MSIVector, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.noVectors {
		return nil, errors.New("no free GSI")
	}
	v := &fakeVector{Interrupt: virtiotest.NewInterrupt()}
	h.vectors = append(h.vectors, v)
	return v, nil
}

func (h *fakeHV) ioeventfd(gpa uint64) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fd, ok := h.ioevents[gpa]
	return fd, ok
}

// guestWrite is what KVM does on a guest write to gpa: signal the bound
// eventfd. It reports false when no ioeventfd covers gpa.
func (h *fakeHV) guestWrite(gpa uint64) bool {
	fd, ok := h.ioeventfd(gpa)
	if ok {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(fd, one[:])
	}
	return ok
}

type fakeVector struct {
	*virtiotest.Interrupt
	closed bool
}

func (v *fakeVector) Close() error { v.closed = true; return nil }

// fakeDevice is a virtio device with two queues that records what the
// transport does to it.
type fakeDevice struct {
	mu          sync.Mutex
	activations []virtio.Activation
	resets      int
	activateErr error
	config      [8]byte
}

const fakeFeatures = virtio.FeatureVersion1 | virtio.FeatureEventIdx | virtio.FeatureIndirectDesc | 1<<5

func (d *fakeDevice) Type() uint16            { return 1 }
func (d *fakeDevice) Features() uint64        { return fakeFeatures }
func (d *fakeDevice) QueueMaxSizes() []uint16 { return []uint16{256, 256} }
func (d *fakeDevice) ReadConfig(off uint64, data []byte) {
	for i := range data {
		data[i] = 0
		if o := off + uint64(i); o < uint64(len(d.config)) {
			data[i] = d.config[o]
		}
	}
}
func (d *fakeDevice) WriteConfig(off uint64, data []byte) {}
func (d *fakeDevice) Activate(a virtio.Activation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.activateErr != nil {
		return d.activateErr
	}
	d.activations = append(d.activations, a)
	return nil
}
func (d *fakeDevice) Reset() {
	d.mu.Lock()
	d.resets++
	d.mu.Unlock()
}

func (d *fakeDevice) last(t *testing.T) virtio.Activation {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.activations) == 0 {
		t.Fatal("the device was never activated")
	}
	return d.activations[len(d.activations)-1]
}

func fdReadable(t *testing.T, fd int) bool {
	t.Helper()
	var buf [8]byte
	_, err := unix.Read(fd, buf[:])
	if err == unix.EAGAIN {
		return false
	}
	if err != nil {
		t.Fatalf("reading kick eventfd %d: %v", fd, err)
	}
	return true
}

func fdClosed(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == unix.EBADF
}
