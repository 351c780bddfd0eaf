package vmm

import (
	"fmt"
	"strings"

	"tinyvmm/devices"
	"tinyvmm/netbackend"
	"tinyvmm/userproc"
	"tinyvmm/virtio"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtionet"
)

// netDevice is one virtio-net device behind its virtio-pci transport.
type netDevice struct {
	dev       *virtionet.Device
	transport *pci.Transport
}

func (n *netDevice) stats() any { return n.dev.Stats() }

// openNets opens (or creates) each --net backend and makes its device on
// it: the device opens nothing itself. It needs no KVM, so a busy or
// missing tap is reported before /dev/kvm.
func (m *machine) openNets() error {
	for _, nc := range m.cfg.Nets {
		cfg := nc.config()
		if cfg.Queues == 0 {
			cfg.Queues = defaultQueues(cfg, m.cfg.CPUs)
		}
		if cfg.Log == nil {
			cfg.Log = func(format string, args ...any) { m.logf(format, args...) }
		}
		cfg.VCPUThreads = m.vcpuThreads
		// The one normalization of the config the device runs on: the
		// defaults and the rules are virtionet's.
		cfg, err := cfg.Normalized()
		if err != nil {
			return err
		}
		var dev *virtionet.Device
		if nc.User != nil {
			dev, err = m.openUserNet(cfg, *nc.User)
		} else {
			dev, err = openNet(cfg)
		}
		if err != nil {
			return err
		}
		m.onTeardown(func() { dev.Close() })
		m.nets = append(m.nets, &netDevice{dev: dev})
	}
	return nil
}

// defaultQueues is the number of queue pairs of a --net that names none:
// virtionet's default, but one on an existing tap made without
// multi_queue, which takes no more.
func defaultQueues(cfg virtionet.Config, cpus int) int {
	if cfg.AFPacket == "" && !cfg.User && netbackend.SingleQueueTap(cfg.Ifname) {
		return 1
	}
	return virtionet.DefaultQueues(cfg, cpus)
}

// openNet opens the tap cfg.Ifname (creating it when it may), or the
// AF_PACKET socket on cfg.AFPacket, and makes the device on it; cfg.Log is
// told which. cfg is normalized.
func openNet(cfg virtionet.Config) (*virtionet.Device, error) {
	var b virtionet.Backend
	if cfg.AFPacket != "" {
		p, err := netbackend.OpenAFPacket(cfg.AFPacket)
		if err != nil {
			return nil, err
		}
		cfg.Log("opened af_packet on %s", cfg.AFPacket)
		b = p
	} else {
		tap, err := netbackend.OpenTapQueues(cfg.Ifname, cfg.MTU, cfg.Queues)
		if err != nil {
			return nil, err
		}
		cfg.Log("%s", tap.Opened())
		b = tap
	}
	dev, err := virtionet.New(cfg, b)
	if err != nil {
		b.Close()
	}
	return dev, err
}

// vcpuThreads are the ids of the vCPU threads that have run so far: the
// net devices' workers look at where these may run (Tuning.PollLone).
func (m *machine) vcpuThreads() []int {
	var tids []int
	for _, c := range m.cpus {
		if t := c.Thread(); t != 0 {
			tids = append(tids, t)
		}
	}
	return tids
}

// openUserNet starts a user-mode network (a tinyvmm-usernet process, see
// userproc) and the device on it; cfg is normalized.
func (m *machine) openUserNet(cfg virtionet.Config, uc userproc.Config) (*virtionet.Device, error) {
	uc.MAC, uc.MTU = cfg.MAC, cfg.MTU // cfg is normalized: the device's own
	b, err := userproc.Start(uc, func(format string, args ...any) { m.logf(format, args...) })
	if err != nil {
		return nil, err
	}
	dev, err := virtionet.New(cfg, b)
	if err != nil {
		b.Close()
		return nil, err
	}
	for i, addr := range b.Forwards() {
		if !strings.HasSuffix(uc.Forwards[i].Host, ":0") {
			continue // the user knows the port
		}
		m.cfg.Notices = append(m.cfg.Notices, fmt.Sprintf("net %s: %s forwards to guest port %d", cfg.Ifname, addr, uc.Forwards[i].GuestPort))
	}
	return dev, nil
}

// attachPCI puts the PCI host bridge on ports 0xCF8-0xCFF and each net
// and share device behind a virtio-pci function, its BAR in the 32-bit hole.
func (m *machine) attachPCI() error {
	bus := devices.NewPCIBus(m.mmio)
	if err := m.pio.Register(devices.PCIConfigAddressPort, devices.PCIConfigPorts, bus); err != nil {
		return err
	}
	type fn struct {
		name string
		dev  virtio.Device
		set  func(*pci.Transport)
	}
	var fns []fn
	for _, n := range m.nets {
		fns = append(fns, fn{"net " + n.dev.Stats().Ifname, n.dev, func(t *pci.Transport) { n.transport = t }})
	}
	for _, s := range m.shares {
		fns = append(fns, fn{"share " + s.cfg.HostDir, s.dev, func(t *pci.Transport) { s.transport = t }})
	}
	for i, f := range fns {
		bar := uint64(mmioHoleStart) + uint64(i)*pci.BARSize
		if bar+pci.BARSize > mmioHoleEnd {
			return fmt.Errorf("too many --net and --share devices for the PCI hole")
		}
		t, err := pci.New(f.dev, m.hv, m.ram.regions, pci.Options{
			BARAddr: bar, Notify: m.cfg.Notify, Logf: func(format string, args ...any) { m.logf(format, args...) },
		})
		if err != nil {
			return fmt.Errorf("%s: %v", f.name, err)
		}
		m.onTeardown(t.Close)
		if _, err := bus.Add(t.PCI()); err != nil {
			return err
		}
		f.set(t)
	}
	return nil
}

// stopNets stops every net device's workers while guest memory is still
// mapped (the vCPUs have stopped; teardown closes the rest).
func (m *machine) stopNets() {
	for _, n := range m.nets {
		n.dev.Reset()
	}
}
