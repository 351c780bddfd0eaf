package virtionet

import "tinyvmm/netbackend"

// The backends the VMM hands in implement the device's interfaces
// without importing this package; these lines keep it so.
var (
	_ Backend     = (*netbackend.Tap)(nil)
	_ MultiQueue  = (*netbackend.Tap)(nil)
	_ Backend     = (*netbackend.AFPacket)(nil)
	_ MultiFramer = (*netbackend.AFPacket)(nil)
	_ Backend     = (*netbackend.SocketPair)(nil)
	_ MultiFramer = (*netbackend.SocketPair)(nil)
	_ Backend     = (*netbackend.SocketPairs)(nil)
	_ MultiQueue  = (*netbackend.SocketPairs)(nil)
)
