package virtiotest

import "encoding/binary"

// The raw hooks below write the rings exactly as told, with no checks and
// no bookkeeping: they are how tests build the layouts a hostile or buggy
// guest would. Mixing them with AddChain on the same ring is possible but
// the Ring's free list does not know about raw descriptors.

// WriteDesc writes descriptor i of the ring's table.
func (r *Ring) WriteDesc(i uint16, d RawDesc) { r.putDesc(r.desc, i%r.Size, d) }

// WriteIndirect writes descs as a descriptor table at guest address gpa.
func (r *Ring) WriteIndirect(gpa uint64, descs []RawDesc) {
	table := r.d.Bytes(gpa, len(descs)*16)
	for i, d := range descs {
		r.putDesc(table, uint16(i), d)
	}
}

// PushAvail puts head in the next avail slot and publishes avail.idx + 1.
func (r *Ring) PushAvail(head uint16) { r.publish(head) }

// SetAvailRing writes avail.ring[slot] without touching avail.idx.
func (r *Ring) SetAvailRing(slot, head uint16) {
	binary.LittleEndian.PutUint16(r.avail[2*int(slot%r.Size):], head)
}

// SetAvailIdx publishes an arbitrary avail.idx.
func (r *Ring) SetAvailIdx(v uint16) {
	r.availIdx = v
	r.fields.availIdx.Store(v)
}

// UsedIdx returns the device's used.idx.
func (r *Ring) UsedIdx() uint16 { return r.fields.usedIdx.Load() }
