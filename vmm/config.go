// Package vmm wires one virtual machine together from a Config: guest RAM,
// KVM, the boot state, vCPU threads, the buses and devices, and a clean
// teardown. It is the only package that knows all the others.
package vmm

import (
	"fmt"
	"io"
	"path/filepath"

	"tinyvmm/userproc"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtiofs"
	"tinyvmm/virtionet"
)

// Config is one VM as the CLI (or a test) describes it.
type Config struct {
	// Kernel is the path of a bzImage or vmlinux ELF; KernelData, when
	// set, is used instead.
	Kernel     string
	KernelData []byte
	// Initrd is the path of an initramfs (optional); InitrdData, when set,
	// is used instead.
	Initrd     string
	InitrdData []byte
	// Cmdline is appended to tinyvmm's own kernel arguments (with
	// UserStart, it is the guest's whole argument string).
	Cmdline string
	// Command, when set, is run by the guest's init (tinyvmm.cmd=).
	Command []string

	// UserStart starts Kernel as a freestanding static ELF directly in
	// user mode (CPL3, long mode, IOPL 3, interrupts off; boot.LoadUser):
	// the bench guest, which under PVM runs natively only that way. There
	// is no initrd and no Linux command line.
	UserStart bool

	MemBytes uint64
	CPUs     int

	Nets []NetConfig
	// Shares are host directories served to the guest over virtio-fs;
	// the default guest's init mounts each at its GuestPath.
	Shares []ShareConfig
	// ShareCache is the cache policy of the Shares (virtiofs.CacheAuto
	// if zero); the Root tree is always virtiofs.CacheAlways.
	ShareCache virtiofs.Cache
	// Root, when set, is a host directory ("/" for the host's own root)
	// the default guest's init makes its root: read-only over virtio-fs,
	// under a tmpfs overlay that takes the writes, with fresh /proc,
	// /sys, /dev, /run and /tmp, and the Shares mounted inside.
	Root string
	// Env is what the command's environment gets besides init's own
	// (with Root: the host's PATH, HOME and the like), as KEY=VALUE.
	Env []string
	// WorkDir is the host's working directory: when it lies inside a
	// share, the guest runs Command in the matching guest directory.
	WorkDir string
	// Notify is how guest kicks reach the virtio devices: the zero value
	// pci.NotifyIoeventfd, or pci.NotifyExit (a vCPU exit handled in Go,
	// for comparison).
	Notify pci.NotifyMode

	// Stats, when non-empty, reports timings and device counters at exit:
	// "-" as text on Log, any other value is a file for JSON.
	Stats string
	// Trace, when set, gets compact per-event lines from the datapath.
	Trace io.Writer

	// Console receives the guest's serial output (stdout in the CLI).
	Console io.Writer
	// ConsoleIn, when set, feeds the guest's serial input (the terminal).
	ConsoleIn io.Reader
	// Escape enables Ctrl-A x on ConsoleIn to stop the guest.
	Escape bool
	// Log receives tinyvmm's one-line notices (stderr in the CLI).
	Log io.Writer
	// Notices are printed on Log once the VM is set up and about to run
	// (so a failed start shows only its error).
	Notices []string
}

// NetConfig is one virtio-net device: the tap and the device's own
// settings (MAC, MTU, datapath tuning), as virtionet defines them.
type NetConfig struct {
	virtionet.Config
	// User, instead of a tap, puts the device on a user-mode network of
	// its own (--net user): a tinyvmm-usernet process (userproc), no root. Its MAC and
	// MTU are the device's; Ifname only names it ("user0").
	User *userproc.Config
}

// Limits on the machine shape.
const (
	MinMemBytes = 16 << 20
	MaxMemBytes = 1 << 40
	MaxCPUs     = 64
)

// check validates everything that needs no file and no KVM, one line per
// problem, so bad flags fail before anything is opened.
func (c *Config) check() error {
	switch {
	case c.MemBytes == 0:
		return fmt.Errorf("memory size is 0; give --mem a size such as 256M")
	case c.MemBytes < MinMemBytes:
		return fmt.Errorf("memory size %d bytes is too small; tinyvmm needs at least 16M", c.MemBytes)
	case c.MemBytes > MaxMemBytes:
		return fmt.Errorf("memory size %d bytes is more than tinyvmm supports (1T)", c.MemBytes)
	case c.CPUs < 1 || c.CPUs > MaxCPUs:
		return fmt.Errorf("--cpus %d is outside 1..%d", c.CPUs, MaxCPUs)
	}
	switch c.Notify {
	case pci.NotifyIoeventfd, pci.NotifyExit:
	default:
		return fmt.Errorf("--notify %v is not one of ioeventfd, exit", c.Notify)
	}
	if c.UserStart && (c.Initrd != "" || c.InitrdData != nil || len(c.Command) > 0) {
		return fmt.Errorf("a user-mode guest (--bench-guest) takes no initrd and no command; pass its arguments with --append")
	}
	if c.Kernel == "" && c.KernelData == nil {
		return fmt.Errorf("no kernel given; pass --kernel PATH")
	}
	if err := checkShares(c.Shares); err != nil {
		return err
	}
	if c.Root != "" && !filepath.IsAbs(c.Root) {
		return fmt.Errorf("--root %s: give an absolute path", c.Root)
	}
	seen := map[string]bool{}
	for _, n := range c.Nets {
		// Each NIC's own rules are the device's (virtionet.Config);
		// that no two NICs share an interface is the VM's.
		if err := n.config().Validate(); err != nil {
			return err
		}
		name := n.Ifname
		if n.AFPacket != "" {
			name = n.AFPacket
		}
		if seen[name] {
			return fmt.Errorf("--net %s is given twice", name)
		}
		seen[name] = true
	}
	return nil
}

// config is the device's config of n; User says whether it is on a user
// network, which n.User configures.
func (n NetConfig) config() virtionet.Config {
	c := n.Config
	c.User = c.User || n.User != nil
	return c
}
