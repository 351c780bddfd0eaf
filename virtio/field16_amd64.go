package virtio

// load16 and store16 are 16-bit atomic accesses (field16_amd64.s), which
// sync/atomic lacks. Field16 uses them only for a field whose 32-bit word
// RAM cuts in half; the race detector does not see them.
func load16(p *uint16) uint16
func store16(p *uint16, v uint16)

const have16 = true
