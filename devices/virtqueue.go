package devices

// PLACEHOLDER API: the signatures below are the contract that virtionet codes
// against; the helper that owns the split virtqueue replaces the bodies (and
// may add fields and methods, but keeps these signatures).

// Desc is one guest buffer of a descriptor chain, already checked to lie
// inside guest memory.
type Desc struct {
	Addr  uint64
	Len   uint32
	Write bool // device-writable
}

// Chain is one available descriptor chain: readable buffers first, then
// writable ones (the spec's order; a chain that breaks it is an error).
type Chain struct {
	Head uint16
	Bufs []Desc
}

// Queue is one split virtqueue as the device sees it. Its addresses and
// size are set by the transport from the driver's writes; Ready marks it
// usable. Only one goroutine (the device's worker) may call its methods
// after activation.
type Queue struct {
	Size      uint16
	MaxSize   uint16
	DescAddr  uint64
	AvailAddr uint64
	UsedAddr  uint64
	Ready     bool
	EventIdx  bool // VIRTIO_RING_F_EVENT_IDX negotiated
	Mem       Memory
}

// Pop takes the next available chain. ok is false when the avail ring is
// empty. err is non-nil when the guest broke the queue (a loop, a chain
// longer than the queue, an address outside memory, a writable buffer
// before a readable one, an avail index that jumped more than Size): the
// queue must not be used again until reset.
func (q *Queue) Pop() (c Chain, ok bool, err error) { panic("unimplemented") }

// Rewind gives back the last n popped chains that were not used, so the
// next Pop returns them again (rx pre-parses buffers it may not fill).
func (q *Queue) Rewind(n uint16) { panic("unimplemented") }

// AddUsed writes one used element; the guest does not see it until PublishUsed.
func (q *Queue) AddUsed(head uint16, written uint32) { panic("unimplemented") }

// PublishUsed makes all added used elements visible (one store of used.idx,
// after the elements).
func (q *Queue) PublishUsed() { panic("unimplemented") }

// NeedsInterrupt says whether the guest wants an interrupt for what was
// published since the last call that returned true (EVENT_IDX used_event,
// or the NO_INTERRUPT flag without it).
func (q *Queue) NeedsInterrupt() bool { panic("unimplemented") }

// EnableNotify asks the guest to kick on new buffers (avail_event, or clears
// NO_NOTIFY) and reports whether buffers arrived meanwhile, so the caller
// re-checks instead of sleeping on a kick that will not come.
func (q *Queue) EnableNotify() (more bool) { panic("unimplemented") }

// DisableNotify asks the guest not to kick while the device is polling.
func (q *Queue) DisableNotify() { panic("unimplemented") }

// HasAvail reports whether an available chain is waiting.
func (q *Queue) HasAvail() bool { panic("unimplemented") }
