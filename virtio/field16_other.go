//go:build !amd64

package virtio

// Without 16-bit atomics a field whose 32-bit word RAM cuts in half cannot
// be bound (NewField16 says so); tinyvmm runs on amd64 only anyway.
func load16(p *uint16) uint16     { panic("virtio: no 16-bit atomics on this architecture") }
func store16(p *uint16, v uint16) { panic("virtio: no 16-bit atomics on this architecture") }

const have16 = false
