package kvm

import (
	"encoding/binary"
	"fmt"
	stdio "io"

	"golang.org/x/sys/unix"
)

// KVM's binary statistics (KVM_GET_STATS_FD, Linux 5.14+): the counters that
// debugfs shows per VM and per vCPU (exits, io_exits, halt_exits, ...),
// readable from the fd without debugfs being built or mounted.

var ioctlGetStatsFD = io(0xce)

// Layout of struct kvm_stats_header and struct kvm_stats_desc.
const (
	statsHeaderSize = 24
	statsDescFixed  = 16 // flags, exponent, size, offset, bucket_size; then the name
	statsTypeMask   = 0xf
	statsTypeHistLo = 3 // KVM_STATS_TYPE_LINEAR_HIST and above are histograms
	maxStatsDescs   = 4096
	maxStatsName    = 1024
)

// StatsFD is KVM_GET_STATS_FD on the VM fd.
func (vm *VM) StatsFD() (int, error) { return statsFD(vm.fd, "VM") }

// StatsFD is KVM_GET_STATS_FD on the vCPU fd. Take it before the vCPU runs:
// vCPU ioctls wait for a running KVM_RUN to return; reading the fd does not.
func (v *VCPU) StatsFD() (int, error) { return statsFD(v.fd, fmt.Sprintf("vCPU %d", v.id)) }

func statsFD(fd int, what string) (int, error) {
	s, err := ioctlValue(fd, ioctlGetStatsFD, 0)
	if err != nil {
		return -1, fmt.Errorf("KVM_GET_STATS_FD on %s: %w", what, err)
	}
	unix.CloseOnExec(s)
	return s, nil
}

// fdReaderAt reads a stats fd with pread, so one fd can be read many times.
type fdReaderAt int

func (f fdReaderAt) ReadAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(f), b, off)
	if err == nil && n < len(b) {
		err = stdio.ErrUnexpectedEOF
	}
	return n, err
}

// ReadStats reads the single-value counters of a stats fd by name.
func ReadStats(fd int) (map[string]uint64, error) { return ParseStats(fdReaderAt(fd)) }

// ParseStats decodes the kvm_stats_header, its descriptors and data from r.
// Histograms are left out. The sizes are checked, so a short or odd file is
// an error, not a panic.
func ParseStats(r stdio.ReaderAt) (map[string]uint64, error) {
	h := make([]byte, statsHeaderSize)
	if _, err := r.ReadAt(h, 0); err != nil {
		return nil, fmt.Errorf("KVM stats header: %w", err)
	}
	le := binary.LittleEndian
	nameSize, num := le.Uint32(h[4:]), le.Uint32(h[8:])
	descOff, dataOff := int64(le.Uint32(h[16:])), int64(le.Uint32(h[20:]))
	if num > maxStatsDescs || nameSize > maxStatsName {
		return nil, fmt.Errorf("KVM stats header: %d descriptors with %d-byte names is implausible", num, nameSize)
	}
	descSize := statsDescFixed + int(nameSize)
	descs := make([]byte, int(num)*descSize)
	if _, err := r.ReadAt(descs, descOff); err != nil {
		return nil, fmt.Errorf("KVM stats descriptors: %w", err)
	}
	out := make(map[string]uint64, num)
	var v [8]byte
	for i := 0; i < int(num); i++ {
		d := descs[i*descSize : (i+1)*descSize]
		flags, size, off := le.Uint32(d[0:]), le.Uint16(d[6:]), le.Uint32(d[8:])
		if flags&statsTypeMask >= statsTypeHistLo || size != 1 {
			continue
		}
		name := d[statsDescFixed:]
		for j, c := range name {
			if c == 0 {
				name = name[:j]
				break
			}
		}
		if _, err := r.ReadAt(v[:], dataOff+int64(off)); err != nil {
			return nil, fmt.Errorf("KVM stat %s: %w", name, err)
		}
		out[string(name)] = le.Uint64(v[:])
	}
	return out, nil
}
