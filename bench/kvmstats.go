package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// KVM's per-vCPU statistics of another process's VM, read the same way for
// tinyvmm and QEMU: the VMM's vCPU file descriptors are copied into this
// process (pidfd_getfd) and each gives a binary statistics fd
// (KVM_GET_STATS_FD, Linux 5.14+). This needs no debugfs: the L1 kernel
// has none (CONFIG_DEBUG_FS is off), and its /sys/kernel/debug/kvm/PID-FD
// files would hold the same numbers summed over the vCPUs, as we do here.
// A stats fd holds a reference on the VM, so the counters stay readable for
// a moment after the VMM exits; vmStats.Close lets it go.

// kvmGetStatsFD is KVM_GET_STATS_FD, _IO(KVMIO, 0xce).
const kvmGetStatsFD = 0xae<<8 | 0xce

// The counters a run reports. KVM's names (arch/x86/kvm/x86.c):
// exits counts every VM exit; io_exits and mmio_exits those that went to
// the VMM in user space (a notify handled by an ioeventfd in the kernel is
// in exits only); halt_exits HLTs; irq_exits exits for the host's own
// interrupts (timer ticks included); irq_injections the interrupts KVM
// injected into the guest (MSI from an irqfd, timer, ...).
var kvmCounters = []string{"exits", "io_exits", "mmio_exits", "halt_exits", "irq_exits", "irq_injections"}

// kvmCounts are named counter values, summed over a VM's vCPUs.
type kvmCounts map[string]uint64

// sub is c - before, per counter; a counter that went backwards (it
// cannot, unless the two come from different VMs) is an error.
func (c kvmCounts) sub(before kvmCounts) (kvmCounts, error) {
	d := kvmCounts{}
	for k, v := range c {
		b, ok := before[k]
		if !ok {
			continue
		}
		if v < b {
			return nil, fmt.Errorf("kvm stat %s went backwards: %d -> %d", k, b, v)
		}
		d[k] = v - b
	}
	return d, nil
}

// statsDesc is one counter of a stats fd: where its value is in the data
// block and how many u64 it has (histograms have more than one).
type statsDesc struct {
	name   string
	offset uint32
	size   uint16
}

// statsLayout is a stats fd's header and descriptors, read once; its data
// block is read again for each snapshot.
type statsLayout struct {
	descs   []statsDesc
	dataOff int64
	dataLen int
}

// Bounds on what a stats header may claim (6.1 has 46 vCPU stats, names
// up to KVM_STATS_NAME_SIZE = 48 bytes).
const (
	maxStatsDescs    = 4096
	maxStatsNameSize = 256
	maxStatsData     = 1 << 20
)

// parseStatsLayout reads the header and descriptors of a KVM binary stats
// file (Documentation/virt/kvm/api.rst, KVM_GET_STATS_FD).
func parseStatsLayout(r io.ReaderAt) (statsLayout, error) {
	var h [24]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return statsLayout{}, fmt.Errorf("kvm stats header: %w", err)
	}
	le := binary.LittleEndian
	nameSize, numDesc := le.Uint32(h[4:]), le.Uint32(h[8:])
	descOff, dataOff := le.Uint32(h[16:]), le.Uint32(h[20:])
	if nameSize == 0 || nameSize > maxStatsNameSize || numDesc > maxStatsDescs {
		return statsLayout{}, fmt.Errorf("kvm stats header: name size %d, %d descriptors", nameSize, numDesc)
	}
	stride := 16 + int(nameSize)
	buf := make([]byte, stride*int(numDesc))
	if _, err := r.ReadAt(buf, int64(descOff)); err != nil {
		return statsLayout{}, fmt.Errorf("kvm stats descriptors: %w", err)
	}
	l := statsLayout{dataOff: int64(dataOff)}
	for i := 0; i < int(numDesc); i++ {
		d := buf[i*stride : (i+1)*stride]
		sd := statsDesc{offset: le.Uint32(d[8:]), size: le.Uint16(d[6:])}
		name := d[16:]
		if n := strings.IndexByte(string(name), 0); n >= 0 {
			name = name[:n]
		}
		sd.name = string(name)
		end := int(sd.offset) + 8*int(sd.size)
		if sd.size == 0 || end > maxStatsData {
			return statsLayout{}, fmt.Errorf("kvm stat %q: %d values at offset %d", sd.name, sd.size, sd.offset)
		}
		l.dataLen = max(l.dataLen, end)
		l.descs = append(l.descs, sd)
	}
	return l, nil
}

// values reads the data block and returns every single-valued counter.
func (l statsLayout) values(r io.ReaderAt) (kvmCounts, error) {
	buf := make([]byte, l.dataLen)
	if _, err := r.ReadAt(buf, l.dataOff); err != nil {
		return nil, fmt.Errorf("kvm stats data: %w", err)
	}
	c := kvmCounts{}
	for _, d := range l.descs {
		if d.size == 1 {
			c[d.name] = binary.LittleEndian.Uint64(buf[d.offset:])
		}
	}
	return c, nil
}

// vmFDs is what a VMM process's file table says about KVM and io_uring.
type vmFDs struct {
	vcpus    []int // fd numbers of its vCPUs
	ioURings int   // io_uring instances it holds open
}

// scanFDs reads the links in dir (/proc/PID/fd): KVM names a vCPU's fd
// "anon_inode:kvm-vcpu:N", an io_uring's "anon_inode:[io_uring]".
func scanFDs(dir string) (vmFDs, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return vmFDs{}, err
	}
	var v vmFDs
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case strings.HasPrefix(target, "anon_inode:kvm-vcpu:"):
			v.vcpus = append(v.vcpus, fd)
		case target == "anon_inode:[io_uring]":
			v.ioURings++
		}
	}
	return v, nil
}

// vmStats reads the KVM counters of one VMM process's VM.
type vmStats struct {
	files   []*os.File // one stats fd per vCPU
	layouts []statsLayout
	// IOURings is how many io_urings the VMM held when this was opened.
	IOURings int
}

// openVMStats finds pid's vCPUs and opens their stats fds.
func openVMStats(pid int) (*vmStats, error) {
	fds, err := scanFDs(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	if len(fds.vcpus) == 0 {
		return nil, fmt.Errorf("kvm stats: process %d has no vCPU fd", pid)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("kvm stats: pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	s := &vmStats{IOURings: fds.ioURings}
	for _, fd := range fds.vcpus {
		f, l, err := vcpuStats(pidfd, fd)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files, s.layouts = append(s.files, f), append(s.layouts, l)
	}
	return s, nil
}

func vcpuStats(pidfd, fd int) (*os.File, statsLayout, error) {
	vcpu, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, statsLayout{}, fmt.Errorf("kvm stats: pidfd_getfd %d: %w", fd, err)
	}
	sfd, err := unix.IoctlRetInt(vcpu, kvmGetStatsFD)
	unix.Close(vcpu) // the stats fd holds the VM
	if err != nil {
		return nil, statsLayout{}, fmt.Errorf("kvm stats: KVM_GET_STATS_FD: %w", err)
	}
	f := os.NewFile(uintptr(sfd), "kvm-vcpu-stats")
	l, err := parseStatsLayout(f)
	if err != nil {
		f.Close()
		return nil, statsLayout{}, err
	}
	return f, l, nil
}

// Read returns the counters summed over the vCPUs.
func (s *vmStats) Read() (kvmCounts, error) {
	if s == nil || len(s.files) == 0 {
		return nil, errors.New("kvm stats: not open")
	}
	sum := kvmCounts{}
	for i, f := range s.files {
		c, err := s.layouts[i].values(f)
		if err != nil {
			return nil, err
		}
		for k, v := range c {
			sum[k] += v
		}
	}
	return sum, nil
}

// Close releases the stats fds and with them the VM.
func (s *vmStats) Close() {
	if s == nil {
		return
	}
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}

// exitDetail turns a run's counter deltas into a sample's details: the raw
// counts as kvm_NAME and, per frame the guest moved, exits_per_frame,
// irqs_per_frame (interrupts KVM injected) and kicks_per_frame (the guest's
// own count of notify writes, the same guest code under both VMMs; each
// is one exit, to an ioeventfd or to the VMM). No frames, no ratios.
func exitDetail(d kvmCounts, frames, kicks float64) map[string]float64 {
	m := map[string]float64{}
	for _, k := range kvmCounters {
		if v, ok := d[k]; ok {
			m["kvm_"+k] = float64(v)
		}
	}
	if frames <= 0 {
		return m
	}
	if v, ok := d["exits"]; ok {
		m["exits_per_frame"] = float64(v) / frames
	}
	if v, ok := d["irq_injections"]; ok {
		m["irqs_per_frame"] = float64(v) / frames
	}
	m["kicks_per_frame"] = kicks / frames
	return m
}
