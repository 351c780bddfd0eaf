package e2e

import (
	"fmt"
	"os/exec"

	"tinyvmm/internal/scratchns"
)

// TapName is the tap inside every bench namespace; HostCIDR is its address,
// the project's convention (scripts/netns.sh).
const (
	TapName  = "tap0"
	HostCIDR = "10.0.2.1/24"
)

// Namespace is a network namespace that a benchmark or test creates for
// itself, with a tap inside. Nothing here touches the machine's own
// namespace; Close removes the namespace and with it the tap. It needs no
// iproute2 (netlink only), so it also works in a minimal nested L1.
type Namespace struct {
	*scratchns.NS
}

// NewNamespace creates a namespace with a persistent tap (vnet_hdr) at
// HostCIDR, up. On error nothing is left behind.
func NewNamespace() (*Namespace, error) {
	n, err := scratchns.New("tvbench")
	if err != nil {
		return nil, fmt.Errorf("%v (run as root)", err)
	}
	if _, err := n.AddTap(TapName, HostCIDR); err != nil {
		n.Close()
		return nil, err
	}
	return &Namespace{n}, nil
}

// Start starts cmd inside the namespace: it forks from a thread that is in
// it, and a child keeps the namespaces of the thread that made it.
func (ns *Namespace) Start(cmd *exec.Cmd) error {
	return ns.Do(cmd.Start)
}
