package virtiotest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"tinyvmm/virtio"
)

// RingOptions shape a Ring.
type RingOptions struct {
	// BufSize is the size of the data buffer behind each descriptor
	// (default 2048). A buffer passed to AddChain may not be larger.
	BufSize uint32
	// Indirect is the most entries one indirect table may hold; 0 means
	// AddIndirect is not available (and no memory is reserved for it).
	Indirect int
	// EventIdx lays out and honours VIRTIO_RING_F_EVENT_IDX.
	EventIdx bool
	// NoKickFD skips creating the kick eventfd (Notify must be set then).
	NoKickFD bool
}

// UsedElem is one element of the used ring.
type UsedElem struct {
	ID  uint32 // head of the chain
	Len uint32 // bytes the device wrote
}

// RawDesc is a descriptor exactly as it lies in guest memory.
type RawDesc struct {
	Addr  uint64
	Len   uint32
	Flags uint16
	Next  uint16
}

// Ring is the driver's side of one split virtqueue.
type Ring struct {
	Size                          uint16
	DescAddr, AvailAddr, UsedAddr uint64
	EventIdx                      bool

	// KickFD is the eventfd Kick writes (-1 with NoKickFD).
	KickFD int
	// Notify, when set, is called by Kick instead of writing KickFD (a
	// transport test points it at the notify register).
	Notify func()
	// Irq is the queue's interrupt, handed to the device by Activation.
	Irq *Interrupt
	// Kicks counts notifications actually sent, Suppressed the ones the
	// device's avail_event or NO_NOTIFY made unnecessary.
	Kicks, Suppressed uint64
	// DeviceErr is set when the device returned a used element that names
	// no chain in flight.
	DeviceErr error

	d       *Driver
	opts    RingOptions
	devq    *virtio.Queue
	desc    []byte
	avail   []byte // avail.ring
	used    []byte // used.ring
	fields  ringFields
	kickBuf [8]byte

	availIdx uint16 // next avail index (published after every add)
	kickedAt uint16 // avail index at the previous Kick
	lastUsed uint16

	free     []uint16  // free descriptor indexes (a stack)
	shadow   []RawDesc // what we wrote to each descriptor
	bufAddr  []uint64  // data buffer of each descriptor
	inFlight []chainInfo
	indTable []uint64  // per head: its indirect table
	indBuf   []uint64  // per head*Indirect+j: data buffer of entry j
	indShad  []RawDesc // per head*Indirect+j: what we wrote there

	usedOut []UsedElem
	scratch []RawDesc
}

type ringFields struct {
	availFlags, availIdx, usedEvent, usedFlags, usedIdx, availEvent virtio.Field16
}

type chainInfo struct {
	n        uint16 // descriptors in the chain (entries, for indirect)
	indirect bool
	busy     bool
}

// Sentinel errors of the hot path (they do not allocate).
var (
	ErrRingFull = errors.New("virtiotest: not enough free descriptors")
	ErrTooBig   = errors.New("virtiotest: buffer larger than RingOptions.BufSize")
	ErrNoChain  = errors.New("virtiotest: empty chain")
)

// NewQueue lays out a split virtqueue of size entries (a power of two) in
// guest memory, with a data buffer per descriptor, and a kick eventfd.
func (d *Driver) NewQueue(size uint16, opts RingOptions) (*Ring, error) {
	if size == 0 || size&(size-1) != 0 || size > virtio.MaxQueueSize {
		return nil, fmt.Errorf("virtiotest: queue size %d is not a power of 2 up to %d", size, virtio.MaxQueueSize)
	}
	if opts.BufSize == 0 {
		opts.BufSize = 2048
	}
	n := uint64(size)
	r := &Ring{Size: size, EventIdx: opts.EventIdx, KickFD: -1, Irq: NewInterrupt(), d: d, opts: opts}
	var err error
	alloc := func(bytes, align uint64) uint64 {
		if err != nil {
			return 0
		}
		var gpa uint64
		gpa, err = d.Alloc(bytes, align)
		return gpa
	}
	r.DescAddr = alloc(virtio.DescSize*n, PageSize)
	r.AvailAddr = alloc(6+2*n, 2)
	r.UsedAddr = alloc(6+8*n, PageSize)
	r.bufAddr = make([]uint64, n)
	for i := range r.bufAddr {
		r.bufAddr[i] = alloc(uint64(opts.BufSize), 64)
	}
	if opts.Indirect > 0 {
		k := uint64(opts.Indirect)
		r.indTable = make([]uint64, n)
		r.indBuf = make([]uint64, n*k)
		r.indShad = make([]RawDesc, n*k)
		for i := range r.indTable {
			r.indTable[i] = alloc(virtio.DescSize*k, 16)
		}
		for i := range r.indBuf {
			r.indBuf[i] = alloc(uint64(opts.BufSize), 64)
		}
	}
	if err != nil {
		return nil, err
	}
	r.desc = d.Bytes(r.DescAddr, int(virtio.DescSize*n))
	r.avail = d.Bytes(r.AvailAddr+4, int(2*n))
	r.used = d.Bytes(r.UsedAddr+4, int(8*n))
	f := &r.fields
	for _, b := range []struct {
		dst *virtio.Field16
		gpa uint64
	}{
		{&f.availFlags, r.AvailAddr}, {&f.availIdx, r.AvailAddr + 2}, {&f.usedEvent, r.AvailAddr + 4 + 2*n},
		{&f.usedFlags, r.UsedAddr}, {&f.usedIdx, r.UsedAddr + 2}, {&f.availEvent, r.UsedAddr + 4 + 8*n},
	} {
		if *b.dst, err = virtio.NewField16(d.Mem, b.gpa); err != nil {
			return nil, err
		}
	}
	r.free = make([]uint16, 0, n)
	for i := int(n) - 1; i >= 0; i-- {
		r.free = append(r.free, uint16(i))
	}
	r.shadow = make([]RawDesc, n)
	r.inFlight = make([]chainInfo, n)
	r.usedOut = make([]UsedElem, 0, n)
	r.scratch = make([]RawDesc, 0, n)
	if !opts.NoKickFD {
		if r.KickFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return nil, fmt.Errorf("virtiotest: eventfd: %w", err)
		}
	}
	r.devq = &virtio.Queue{
		Size: size, MaxSize: size, DescAddr: r.DescAddr, AvailAddr: r.AvailAddr, UsedAddr: r.UsedAddr,
		Ready: true, EventIdx: opts.EventIdx, Indirect: opts.Indirect > 0, Mem: d.Mem,
	}
	d.rings = append(d.rings, r)
	return r, nil
}

// Queue returns the device's side of this ring (the same *Queue each call).
func (r *Ring) Queue() *virtio.Queue { return r.devq }

// Free returns the number of free descriptors.
func (r *Ring) Free() int { return len(r.free) }

// BufAddr returns the guest address of descriptor i's data buffer.
func (r *Ring) BufAddr(i uint16) uint64 { return r.bufAddr[i] }

func (r *Ring) closeKick() error {
	if r.KickFD < 0 {
		return nil
	}
	err := unix.Close(r.KickFD)
	r.KickFD = -1
	return err
}

// AddChain posts one chain: a readable buffer holding each of out, then a
// writable buffer of each length in inLens. It publishes the new avail
// index at once (as Linux does) but does not kick.
func (r *Ring) AddChain(out [][]byte, inLens []uint32) (head uint16, err error) {
	n := len(out) + len(inLens)
	switch {
	case n == 0:
		return 0, ErrNoChain
	case n > len(r.free):
		return 0, ErrRingFull
	}
	if err := r.checkSizes(out, inLens); err != nil {
		return 0, err
	}
	head = r.free[len(r.free)-1]
	prev := -1
	for i := 0; i < n; i++ {
		idx := r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
		d := RawDesc{Addr: r.bufAddr[idx]}
		if i < len(out) {
			d.Len = uint32(copy(r.d.Mem[d.Addr:], out[i]))
		} else {
			d.Len, d.Flags = inLens[i-len(out)], virtio.DescFWrite
		}
		r.shadow[idx] = d
		if prev >= 0 {
			r.shadow[prev].Flags |= virtio.DescFNext
			r.shadow[prev].Next = idx
			r.putDesc(r.desc, uint16(prev), r.shadow[prev])
		}
		r.putDesc(r.desc, idx, d)
		prev = int(idx)
	}
	r.inFlight[head] = chainInfo{n: uint16(n), busy: true}
	r.publish(head)
	return head, nil
}

// AddIndirect posts one chain as an indirect table: one descriptor in the
// ring pointing at a table with a readable entry per out and a writable
// entry per inLens.
func (r *Ring) AddIndirect(out [][]byte, inLens []uint32) (head uint16, err error) {
	n := len(out) + len(inLens)
	switch {
	case n == 0:
		return 0, ErrNoChain
	case n > r.opts.Indirect:
		return 0, fmt.Errorf("virtiotest: %d entries exceed RingOptions.Indirect=%d", n, r.opts.Indirect)
	case len(r.free) == 0:
		return 0, ErrRingFull
	}
	if err := r.checkSizes(out, inLens); err != nil {
		return 0, err
	}
	head = r.free[len(r.free)-1]
	r.free = r.free[:len(r.free)-1]
	k := int(head) * r.opts.Indirect
	table := r.d.Mem[r.indTable[head]:]
	for i := 0; i < n; i++ {
		d := RawDesc{Addr: r.indBuf[k+i]}
		if i < len(out) {
			d.Len = uint32(copy(r.d.Mem[d.Addr:], out[i]))
		} else {
			d.Len, d.Flags = inLens[i-len(out)], virtio.DescFWrite
		}
		if i+1 < n {
			d.Flags |= virtio.DescFNext
			d.Next = uint16(i + 1)
		}
		r.indShad[k+i] = d
		r.putDesc(table, uint16(i), d)
	}
	d := RawDesc{Addr: r.indTable[head], Len: uint32(virtio.DescSize * n), Flags: virtio.DescFIndirect}
	r.shadow[head] = d
	r.putDesc(r.desc, head, d)
	r.inFlight[head] = chainInfo{n: uint16(n), indirect: true, busy: true}
	r.publish(head)
	return head, nil
}

// AddRxBuffers posts n chains of one writable buffer of size bytes each,
// the shape of mergeable rx buffers. It returns how many it posted.
func (r *Ring) AddRxBuffers(n int, size uint32) (int, error) {
	lens := [1]uint32{size}
	for i := 0; i < n; i++ {
		if _, err := r.AddChain(nil, lens[:]); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (r *Ring) checkSizes(out [][]byte, inLens []uint32) error {
	for _, b := range out {
		if uint64(len(b)) > uint64(r.opts.BufSize) {
			return ErrTooBig
		}
	}
	for _, l := range inLens {
		if l > r.opts.BufSize {
			return ErrTooBig
		}
	}
	return nil
}

func (r *Ring) putDesc(table []byte, i uint16, d RawDesc) {
	b := table[virtio.DescSize*int(i):]
	binary.LittleEndian.PutUint64(b, d.Addr)
	binary.LittleEndian.PutUint32(b[8:], d.Len)
	binary.LittleEndian.PutUint16(b[12:], d.Flags)
	binary.LittleEndian.PutUint16(b[14:], d.Next)
}

// publish puts head in the next avail slot, then stores avail.idx.
func (r *Ring) publish(head uint16) {
	binary.LittleEndian.PutUint16(r.avail[2*int(r.availIdx%r.Size):], head)
	r.availIdx++
	r.fields.availIdx.Store(r.availIdx)
}

// Kick notifies the device if it wants to know about the chains added
// since the previous Kick: with EVENT_IDX when avail_event lies among
// them, without it unless the device set NO_NOTIFY. It reports whether it
// notified.
func (r *Ring) Kick() bool {
	old, now := r.kickedAt, r.availIdx
	r.kickedAt = now
	var need bool
	if r.EventIdx {
		need = virtio.NeedEvent(r.fields.availEvent.Load(), now, old)
	} else {
		need = now != old && r.fields.usedFlags.Load()&virtio.UsedFNoNotify == 0
	}
	if !need {
		r.Suppressed++
		return false
	}
	r.ForceKick()
	return true
}

// ForceKick notifies the device unconditionally.
func (r *Ring) ForceKick() {
	r.Kicks++
	if r.Notify != nil {
		r.Notify()
		return
	}
	binary.NativeEndian.PutUint64(r.kickBuf[:], 1)
	unix.Write(r.KickFD, r.kickBuf[:]) // cannot fail short of a closed fd; the counter overflowing takes 2^64 kicks
}

// Used returns the elements the device published since the previous call
// and frees their descriptors. The slice is reused by the next call, and
// the freed buffers keep their contents only until the next Add, so read
// them (ReadBuf) first.
func (r *Ring) Used() []UsedElem {
	out := r.usedOut[:0]
	idx := r.fields.usedIdx.Load()
	if idx-r.lastUsed > r.Size {
		r.DeviceErr = fmt.Errorf("virtiotest: device moved used.idx from %d to %d, more than the queue size", r.lastUsed, idx)
		return out
	}
	for ; r.lastUsed != idx; r.lastUsed++ {
		e := r.used[8*int(r.lastUsed%r.Size):]
		u := UsedElem{ID: binary.LittleEndian.Uint32(e), Len: binary.LittleEndian.Uint32(e[4:])}
		if u.ID >= uint32(r.Size) || !r.inFlight[u.ID].busy {
			r.DeviceErr = fmt.Errorf("virtiotest: device returned head %d, which is not in flight", u.ID)
			continue
		}
		r.release(uint16(u.ID))
		out = append(out, u)
	}
	r.usedOut = out
	return out
}

// release puts a chain's descriptors back on the free list.
func (r *Ring) release(head uint16) {
	c := &r.inFlight[head]
	c.busy = false
	if c.indirect {
		r.free = append(r.free, head)
		return
	}
	idx := head
	for i := uint16(0); i < c.n; i++ {
		r.free = append(r.free, idx)
		idx = r.shadow[idx].Next
	}
}

// ReadBuf appends to dst what the device wrote into the chain of u (its
// writable buffers, in order, up to u.Len bytes) and returns it. Call it
// before adding new chains: Used has already freed the buffers.
func (r *Ring) ReadBuf(u UsedElem, dst []byte) []byte {
	left := u.Len
	for _, d := range r.chainDescs(uint16(u.ID)) {
		if left == 0 {
			break
		}
		if d.Flags&virtio.DescFWrite == 0 {
			continue
		}
		n := min(d.Len, left)
		dst = append(dst, r.d.Mem[d.Addr:d.Addr+uint64(n)]...)
		left -= n
	}
	return dst
}

// chainDescs returns the descriptors of the chain at head as we wrote them
// (valid until the next Add).
func (r *Ring) chainDescs(head uint16) []RawDesc {
	c := r.inFlight[head]
	if c.indirect {
		k := int(head) * r.opts.Indirect
		return r.indShad[k : k+int(c.n)]
	}
	// Direct chains are not contiguous in the table; gather them in a
	// scratch slice kept in the ring.
	buf := r.scratch[:0]
	idx := head
	for i := uint16(0); i < c.n; i++ {
		buf = append(buf, r.shadow[idx])
		idx = r.shadow[idx].Next
	}
	r.scratch = buf
	return buf
}

// ReadMergeable reads one frame received with VIRTIO_NET_F_MRG_RXBUF from
// the front of elems: the first buffer starts with a virtio_net_hdr whose
// num_buffers (bytes 10-11) says how many used elements the frame spans.
// It appends the frame (header included) to dst and returns it with the
// number of elements consumed.
func (r *Ring) ReadMergeable(elems []UsedElem, dst []byte) (frame []byte, n int, err error) {
	if len(elems) == 0 {
		return dst, 0, errors.New("virtiotest: no used elements")
	}
	start := len(dst)
	dst = r.ReadBuf(elems[0], dst)
	if len(dst)-start < 12 {
		return dst, 1, fmt.Errorf("virtiotest: first rx buffer holds %d bytes, less than a virtio_net_hdr_mrg_rxbuf", len(dst)-start)
	}
	num := int(binary.LittleEndian.Uint16(dst[start+10:]))
	if num == 0 || num > len(elems) {
		return dst, 1, fmt.Errorf("virtiotest: num_buffers %d, but %d used elements are at hand", num, len(elems))
	}
	for _, u := range elems[1:num] {
		dst = r.ReadBuf(u, dst)
	}
	return dst, num, nil
}

// EnableInterrupts asks the device to interrupt on the next used element
// (used_event = last seen, or clears NO_INTERRUPT) and reports whether
// elements arrived meanwhile.
func (r *Ring) EnableInterrupts() (more bool) {
	if r.EventIdx {
		r.fields.usedEvent.Store(r.lastUsed)
	} else {
		r.fields.availFlags.Store(r.fields.availFlags.Load() &^ virtio.AvailFNoInterrupt)
	}
	return r.fields.usedIdx.Load() != r.lastUsed
}

// DisableInterrupts asks the device not to interrupt: NO_INTERRUPT, or
// with EVENT_IDX a used_event half the index space away.
func (r *Ring) DisableInterrupts() {
	if r.EventIdx {
		r.fields.usedEvent.Store(r.lastUsed + 0x8000)
	} else {
		r.fields.availFlags.Store(r.fields.availFlags.Load() | virtio.AvailFNoInterrupt)
	}
}

// SetUsedEvent writes used_event: interrupt once used.idx passes v.
func (r *Ring) SetUsedEvent(v uint16) { r.fields.usedEvent.Store(v) }

// AvailEvent returns the device's avail_event.
func (r *Ring) AvailEvent() uint16 { return r.fields.availEvent.Load() }

// UsedFlags returns the device's used.flags.
func (r *Ring) UsedFlags() uint16 { return r.fields.usedFlags.Load() }

// AvailIdx returns the driver's avail index (the next one to publish).
func (r *Ring) AvailIdx() uint16 { return r.availIdx }
