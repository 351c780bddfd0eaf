// Package netbackend opens what a virtio-net device's frames go to and
// come from on the host: a tap (one queue or several, IFF_MULTI_QUEUE), an
// AF_PACKET socket on a host interface, and, for tests and benchmarks, a
// SOCK_SEQPACKET socketpair. Each is an fd that carries one frame per
// message, vnet header first.
//
// The VMM opens a backend and hands it to the device (virtionet.New), as
// Firecracker's builder hands a tap to its net device and kvmtool's
// net_dev_operations sit behind its virtio-net. The types here implement
// virtionet.Backend (and MultiFramer, MultiQueue where they can) without
// importing virtionet: the arrows go vmm -> virtionet and vmm ->
// netbackend, and the device never opens a tap or a socket itself.
package netbackend
