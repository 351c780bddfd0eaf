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

// userNet is a --net user's process, started before the rest of the VM.
type userNet struct {
	b      *userproc.Backend
	ifname string
	fwds   []userproc.Forward
}

// normalizeNets makes each --net's device config, normalized once: the
// defaults and the rules are virtionet's.
func (m *machine) normalizeNets() error {
	for _, nc := range m.cfg.Nets {
		cfg := nc.config()
		if cfg.Queues == 0 {
			cfg.Queues = defaultQueues(cfg, m.cfg.CPUs)
		}
		if cfg.Log == nil {
			cfg.Log = func(format string, args ...any) { m.logf(format, args...) }
		}
		cfg.VCPUThreads = m.vcpuThreads
		cfg, err := cfg.Normalized()
		if err != nil {
			return err
		}
		m.netCfgs = append(m.netCfgs, cfg)
	}
	return nil
}

// launchUserNets starts each --net user's process (userproc.Launch) first
// of all, so that it gets ready while the guest is loaded and the VM
// made; openNets makes its device on it, awaitUserNets waits for it.
func (m *machine) launchUserNets() error {
	for i, nc := range m.cfg.Nets {
		if nc.User == nil {
			continue
		}
		uc, cfg := *nc.User, m.netCfgs[i]
		uc.MAC, uc.MTU = cfg.MAC, cfg.MTU // cfg is normalized: the device's own
		b, err := userproc.Launch(uc, func(format string, args ...any) { m.logf(format, args...) })
		if err != nil {
			return err
		}
		m.onTeardown(func() { b.Close() }) // if no device took it
		m.userNets = append(m.userNets, userNet{b: b, ifname: cfg.Ifname, fwds: uc.Forwards})
	}
	return nil
}

// awaitUserNets waits until each --net user's process is ready, and says
// where a hostfwd whose port it chose listens.
func (m *machine) awaitUserNets() error {
	for _, u := range m.userNets {
		if err := u.b.Ready(); err != nil {
			return err
		}
		for i, addr := range u.b.Forwards() {
			if strings.HasSuffix(u.fwds[i].Host, ":0") {
				m.cfg.Notices = append(m.cfg.Notices, fmt.Sprintf("net %s: %s forwards to guest port %d", u.ifname, addr, u.fwds[i].GuestPort))
			}
		}
	}
	return nil
}

// openNets opens (or creates) each --net backend, or takes the user
// network's, and makes its device on it: the device opens nothing itself.
// It needs no KVM, so a busy or missing tap is reported before /dev/kvm.
func (m *machine) openNets() error {
	users := m.userNets
	for i, nc := range m.cfg.Nets {
		var dev *virtionet.Device
		var err error
		if nc.User != nil {
			dev, err = virtionet.New(m.netCfgs[i], users[0].b)
			users = users[1:]
		} else {
			dev, err = openNet(m.netCfgs[i])
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
