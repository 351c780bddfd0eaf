package virtio

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Descriptor flags and ring flags (virtio 1.2, 2.7.5 and 2.7.6-2.7.8).
const (
	DescFNext     = 1 // the chain continues at Next
	DescFWrite    = 2 // the buffer is device-writable
	DescFIndirect = 4 // the buffer is a table of descriptors

	AvailFNoInterrupt = 1 // driver: do not interrupt me (without EVENT_IDX)
	UsedFNoNotify     = 1 // device: do not kick me (without EVENT_IDX)

	DescSize     = 16    // bytes per descriptor
	MaxQueueSize = 32768 // the spec's limit for a split queue
)

// Desc is one guest buffer of a descriptor chain, already checked to lie
// inside guest memory.
type Desc struct {
	Addr  uint64
	Len   uint32
	Write bool   // device-writable
	Buf   []byte // the Len bytes at Addr, aliasing guest memory (Pop checked the range)
}

// Chain is one available descriptor chain: readable buffers first, then
// writable ones (the spec's order; a chain that breaks it is an error).
type Chain struct {
	Head uint16
	Bufs []Desc
}

// Queue is one split virtqueue (virtio 1.2, section 2.7) as the device
// sees it. Its addresses and size are set by the transport from the
// driver's writes; Ready marks it usable. Only one goroutine (the device's
// worker) may call its methods after activation.
//
// A split virtqueue is three areas of guest memory that the driver
// allocates and the transport tells the device about:
//
//	descriptor table  Size x 16 bytes: addr u64, len u32, flags u16, next u16
//	available ring    flags u16, idx u16, ring[Size] u16, used_event u16
//	used ring         flags u16, idx u16, ring[Size] {id u32, len u32}, avail_event u16
//
// The driver puts the head of a descriptor chain into avail.ring and then
// bumps avail.idx; the device takes chains in order (Pop), reads the
// buffers the driver marked readable and writes the ones it marked writable,
// then returns each chain through used.ring and bumps used.idx. Both
// indexes are free-running 16-bit counters: ring slot = idx % Size, which is
// why Size is a power of two.
//
// Everything in these areas is written by the guest and is hostile input.
// Pop checks every descriptor against guest memory, catches loops by
// bounding the chain length, and turns every violation into an error after
// which the queue refuses all work until Reset. The device never writes the
// descriptor table or the available ring.
//
// The ring layout is checked, and the ring areas bound, on the first
// method call after the fields are set (or after Reset); a bad layout is a
// sticky error like any other, reported by Pop and Err.
type Queue struct {
	Size      uint16
	MaxSize   uint16
	DescAddr  uint64
	AvailAddr uint64
	UsedAddr  uint64
	Ready     bool
	EventIdx  bool // VIRTIO_RING_F_EVENT_IDX negotiated
	Indirect  bool // VIRTIO_RING_F_INDIRECT_DESC negotiated: without it an indirect descriptor is an error
	Mem       Memory

	// AvailEventAhead makes EnableNotify ask for a kick only once the
	// driver has made this many more chains available beyond those already
	// seen (0: kick on the next one). It is the device side of the
	// notification threshold; with it above 0 the device must poll by
	// itself, since a driver that adds fewer buffers never kicks. It only
	// has an effect with EventIdx.
	AvailEventAhead uint16

	err   error // sticky: the guest broke the queue
	bound bool  // the fields below describe the current layout

	desc      []byte // descriptor table (read only)
	availRing []byte // avail.ring[Size]
	usedRing  []byte // used.ring[Size]

	availFlags Field16
	availIdx   Field16
	usedEvent  Field16 // in the avail area, written by the driver
	usedFlags  Field16
	usedIdx    Field16
	availEvent Field16 // in the used area, written by the device

	lastAvail   uint16 // next avail slot to take
	seenAvail   uint16 // avail.idx as last read
	nextUsed    uint16 // used.idx including unpublished elements
	signalled   uint16 // used.idx at the previous NeedsInterrupt
	usedFlagsSh uint16 // our copy of used.flags

	bufs []Desc // backing array of the Chain that Pop returns
}

// ErrQueueBroken wraps every error about guest-provided queue state.
var ErrQueueBroken = errors.New("virtqueue broken by the driver")

func (q *Queue) fail(format string, args ...any) error {
	q.err = fmt.Errorf("%w: "+format, append([]any{ErrQueueBroken}, args...)...)
	return q.err
}

// Err returns the sticky error that stopped the queue, or nil.
func (q *Queue) Err() error { return q.err }

// Reset forgets the queue's run-time state (indexes, the sticky error, the
// bound ring areas) and keeps its configuration (size and addresses), so it
// starts over as on first activation. Every exported field is
// configuration and survives (TestResetKeepsConfiguration holds it to that).
func (q *Queue) Reset() {
	bufs := q.bufs[:0]
	*q = Queue{
		Size: q.Size, MaxSize: q.MaxSize,
		DescAddr: q.DescAddr, AvailAddr: q.AvailAddr, UsedAddr: q.UsedAddr,
		Ready: q.Ready, EventIdx: q.EventIdx, Indirect: q.Indirect, Mem: q.Mem,
		AvailEventAhead: q.AvailEventAhead,
		bufs:            bufs,
	}
}

// ringBytes returns the sizes of the three areas for a queue of n entries,
// including the trailing event fields.
func ringBytes(n uint64) (desc, avail, used uint64) {
	return DescSize * n, 6 + 2*n, 6 + 8*n
}

// bind checks the layout and caches the ring areas. The memory behind
// guest RAM never moves, so slices taken once stay valid.
func (q *Queue) bind() error {
	if q.err != nil {
		return q.err
	}
	if q.bound {
		return nil
	}
	n := uint64(q.Size)
	switch {
	case !q.Ready:
		return q.fail("queue used before it was enabled")
	case q.Mem == nil:
		return q.fail("queue has no guest memory")
	case n == 0 || n > MaxQueueSize || n&(n-1) != 0:
		return q.fail("queue size %d is not a power of 2 up to %d", n, MaxQueueSize)
	case q.MaxSize != 0 && q.Size > q.MaxSize:
		return q.fail("queue size %d exceeds the maximum %d", q.Size, q.MaxSize)
	case q.DescAddr%16 != 0 || q.AvailAddr%2 != 0 || q.UsedAddr%4 != 0:
		return q.fail("misaligned rings: desc %#x (needs 16), avail %#x (needs 2), used %#x (needs 4)",
			q.DescAddr, q.AvailAddr, q.UsedAddr)
	}
	dn, an, un := ringBytes(n)
	var err error
	if q.desc, err = q.Mem.Slice(q.DescAddr, dn); err != nil {
		return q.fail("descriptor table: %v", err)
	}
	avail, err := q.Mem.Slice(q.AvailAddr, an)
	if err != nil {
		return q.fail("available ring: %v", err)
	}
	used, err := q.Mem.Slice(q.UsedAddr, un)
	if err != nil {
		return q.fail("used ring: %v", err)
	}
	q.availRing = avail[4 : 4+2*n]
	q.usedRing = used[4 : 4+8*n]
	for _, f := range []struct {
		dst *Field16
		gpa uint64
	}{
		{&q.availFlags, q.AvailAddr}, {&q.availIdx, q.AvailAddr + 2},
		{&q.usedEvent, q.AvailAddr + 4 + 2*n},
		{&q.usedFlags, q.UsedAddr}, {&q.usedIdx, q.UsedAddr + 2},
		{&q.availEvent, q.UsedAddr + 4 + 8*n},
	} {
		if *f.dst, err = NewField16(q.Mem, f.gpa); err != nil {
			return q.fail("ring field: %v", err)
		}
	}
	if cap(q.bufs) < int(n) {
		q.bufs = make([]Desc, 0, n)
	}
	q.bound = true
	return nil
}

// refreshAvail reads avail.idx once and checks how far it moved: never
// more than Size chains can be outstanding.
func (q *Queue) refreshAvail() error {
	idx := q.availIdx.Load()
	if idx-q.lastAvail > q.Size {
		return q.fail("avail index jumped from %d to %d, more than the queue size %d",
			q.lastAvail, idx, q.Size)
	}
	q.seenAvail = idx
	return nil
}

// HasAvail reports whether an available chain is waiting. A broken queue
// reports true, so that the caller's Pop returns the error.
func (q *Queue) HasAvail() bool {
	if q.bind() != nil {
		return true
	}
	if q.seenAvail != q.lastAvail {
		return true
	}
	if q.refreshAvail() != nil {
		return true
	}
	return q.seenAvail != q.lastAvail
}

// Pop takes the next available chain. ok is false when the avail ring is
// empty. err is non-nil when the guest broke the queue (a loop, a chain
// longer than the queue, an address outside memory, a writable buffer
// before a readable one, an avail index that jumped more than Size, a head
// index out of range, a nested indirect table): the queue must not be used
// again until reset, and every later Pop returns the same error.
//
// The returned Chain.Bufs aliases a buffer inside the Queue and is valid
// only until the next Pop; copy it to keep it. Pop does not allocate.
func (q *Queue) Pop() (c Chain, ok bool, err error) {
	if err := q.bind(); err != nil {
		return Chain{}, false, err
	}
	// avail.idx is read (atomically) only when the entries already seen are
	// used up; the ring entries below it were written before it.
	if q.seenAvail == q.lastAvail {
		if err := q.refreshAvail(); err != nil {
			return Chain{}, false, err
		}
		if q.seenAvail == q.lastAvail {
			return Chain{}, false, nil
		}
	}
	slot := uint64(q.lastAvail % q.Size)
	head := binary.LittleEndian.Uint16(q.availRing[2*slot:])
	bufs, err := q.walk(head)
	if err != nil {
		return Chain{}, false, err
	}
	q.lastAvail++
	return Chain{Head: head, Bufs: bufs}, true, nil
}

// walk follows the chain that starts at head. Each descriptor is read once
// into locals, so a guest changing the table meanwhile cannot make the
// checked value differ from the used one.
func (q *Queue) walk(head uint16) ([]Desc, error) {
	if head >= q.Size {
		return nil, q.fail("chain head %d is outside the queue of size %d", head, q.Size)
	}
	bufs := q.bufs[:0]
	table, tableLen := q.desc, uint32(q.Size)
	indirect, sawWrite := false, false
	idx := uint32(head)
	for {
		if idx >= tableLen {
			return nil, q.fail("chain from head %d: next index %d is outside its table of %d", head, idx, tableLen)
		}
		if len(bufs) >= int(q.Size) {
			return nil, q.fail("chain from head %d is longer than the queue size %d (a loop?)", head, q.Size)
		}
		d := table[DescSize*idx:]
		addr := binary.LittleEndian.Uint64(d)
		n := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])

		if flags&DescFIndirect != 0 {
			switch {
			case !q.Indirect:
				return nil, q.fail("chain from head %d: descriptor %d is INDIRECT, which the driver did not negotiate", head, idx)
			case indirect:
				return nil, q.fail("chain from head %d: an indirect table inside an indirect table", head)
			case flags&DescFNext != 0:
				return nil, q.fail("chain from head %d: descriptor %d has both INDIRECT and NEXT", head, idx)
			case n == 0 || n%DescSize != 0 || n/DescSize > uint32(q.Size):
				return nil, q.fail("chain from head %d: indirect table of %d bytes (needs a multiple of %d, at most %d entries)",
					head, n, DescSize, q.Size)
			}
			t, err := q.Mem.Slice(addr, uint64(n))
			if err != nil {
				return nil, q.fail("chain from head %d: indirect table: %v", head, err)
			}
			table, tableLen, indirect, idx = t, n/DescSize, true, 0
			continue
		}
		buf, err := q.Mem.Slice(addr, uint64(n))
		if err != nil {
			return nil, q.fail("chain from head %d: buffer: %v", head, err)
		}
		write := flags&DescFWrite != 0
		if !write && sawWrite {
			return nil, q.fail("chain from head %d: a readable buffer after a writable one", head)
		}
		sawWrite = sawWrite || write
		bufs = append(bufs, Desc{Addr: addr, Len: n, Write: write, Buf: buf})
		if flags&DescFNext == 0 {
			q.bufs = bufs
			return bufs, nil
		}
		idx = uint32(next)
	}
}

// Rewind gives back the last n popped chains that were not used, so the
// next Pop returns them again (rx pre-parses buffers it may not fill).
func (q *Queue) Rewind(n uint16) { q.lastAvail -= n }

// AddUsed writes one used element; the guest does not see it until PublishUsed.
// written is the number of bytes the device wrote into the chain's writable
// buffers.
func (q *Queue) AddUsed(head uint16, written uint32) {
	if q.bind() != nil {
		return
	}
	e := q.usedRing[8*uint64(q.nextUsed%q.Size):]
	binary.LittleEndian.PutUint32(e, uint32(head))
	binary.LittleEndian.PutUint32(e[4:], written)
	q.nextUsed++
}

// PublishUsed makes all added used elements visible (one store of used.idx,
// after the elements).
func (q *Queue) PublishUsed() {
	if q.bind() != nil {
		return
	}
	q.usedIdx.Store(q.nextUsed)
}

// NeedsInterrupt says whether the guest wants an interrupt for what was
// published since the previous call. With EVENT_IDX that is whether
// used_event lies in the window of used indexes published since then
// (vring_need_event); without it, whether anything was published and the
// driver has not set NO_INTERRUPT. The atomic used.idx store in PublishUsed
// comes before the atomic used_event load here, which is the full barrier
// the spec asks for between the two.
func (q *Queue) NeedsInterrupt() bool {
	if q.bind() != nil {
		return false
	}
	old, now := q.signalled, q.usedIdx.Load()
	q.signalled = now
	if !q.EventIdx {
		return now != old && q.availFlags.Load()&AvailFNoInterrupt == 0
	}
	return NeedEvent(q.usedEvent.Load(), now, old)
}

// NeedEvent is the spec's vring_need_event, used on both sides: true when
// the other side's event index lies in the window [old, now) that this side
// just moved its index across. Unsigned 16-bit arithmetic makes it hold
// across wraparound.
func NeedEvent(event, now, old uint16) bool {
	return now-event-1 < now-old
}

// EnableNotify asks the guest to kick on new buffers (avail_event, or clears
// NO_NOTIFY) and reports whether buffers arrived meanwhile, so the caller
// re-checks instead of sleeping on a kick that will not come. With
// AvailEventAhead set, avail_event is placed that many chains further on.
func (q *Queue) EnableNotify() (more bool) {
	if q.bind() != nil {
		return true // let Pop report the error
	}
	if q.EventIdx {
		// From the index last read, not lastAvail: chains given back by
		// Rewind are already on the ring, and a driver past avail_event
		// would never kick again (vhost uses its avail_idx shadow too).
		q.availEvent.Store(q.seenAvail + q.AvailEventAhead)
	} else {
		q.setUsedFlags(q.usedFlagsSh &^ UsedFNoNotify)
	}
	// The store above and this load are both atomic, so the driver either
	// sees the new avail_event or we see its new avail.idx.
	return q.HasAvail()
}

// DisableNotify asks the guest not to kick while the device is polling.
// With EVENT_IDX nothing needs writing: avail_event stays behind the
// driver's index, so it does not kick again until EnableNotify moves it.
func (q *Queue) DisableNotify() {
	if q.bind() != nil || q.EventIdx {
		return
	}
	q.setUsedFlags(q.usedFlagsSh | UsedFNoNotify)
}

// SuppressNotify asks the guest not to kick even for its next buffer, for
// a device that starts polling the ring without having been kicked. With
// EVENT_IDX avail_event goes just behind the index last read, where the
// driver has already passed it: it kicks again only once EnableNotify
// moves it (or after 65,535 more buffers).
func (q *Queue) SuppressNotify() {
	if q.bind() != nil {
		return
	}
	if q.EventIdx {
		q.availEvent.Store(q.seenAvail - 1)
		return
	}
	q.setUsedFlags(q.usedFlagsSh | UsedFNoNotify)
}

func (q *Queue) setUsedFlags(v uint16) {
	q.usedFlagsSh = v
	q.usedFlags.Store(v)
}
