package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/vishvananda/netns"
)

// TapName is the tap inside every bench namespace; HostCIDR is its address,
// the project's convention (scripts/netns.sh).
const (
	TapName  = "tap0"
	HostCIDR = "10.0.2.1/24"
)

// Namespace is a network namespace that a benchmark or test creates for
// itself, with a tap inside. Nothing here touches the machine's own
// namespace; Close removes the namespace and with it the tap.
type Namespace struct {
	Name string
}

var nsCounter atomic.Int32

// NewNamespace creates a namespace with a persistent tap (vnet_hdr) at
// HostCIDR, up. On error nothing is left behind.
func NewNamespace() (*Namespace, error) {
	name := fmt.Sprintf("tvbench%d-%d", os.Getpid(), nsCounter.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s (run as root)", name, err, strings.TrimSpace(string(out)))
	}
	ns := &Namespace{Name: name}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"tuntap", "add", "dev", TapName, "mode", "tap", "vnet_hdr"},
		{"addr", "add", HostCIDR, "dev", TapName},
		{"link", "set", TapName, "up"},
	}
	for _, s := range steps {
		args := append([]string{"-n", name}, s...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			ns.Close()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return ns, nil
}

// Close deletes the namespace. Processes still inside keep it alive until
// they exit, so stop them first.
func (ns *Namespace) Close() error {
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command returns cmd to be run inside the namespace (ip netns exec execs
// it, so the PID is cmd's own).
func (ns *Namespace) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Do runs f on an OS thread that is inside the namespace. Sockets and tap
// fds opened by f belong to the namespace for their whole life.
func (ns *Namespace) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns.Name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("namespace %s: %w", ns.Name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", ns.Name, err)
			return
		}
		ferr := f()
		// A thread that cannot go back stays locked: the runtime then
		// ends it with the goroutine instead of reusing it.
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}
