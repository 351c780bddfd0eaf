package tour

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"tinyvmm/internal/scratchns"
	"tinyvmm/internal/syncbuf"
	"tinyvmm/kvm"
	"tinyvmm/virtionet"
	"tinyvmm/vmm"
)

// The link of the tour: a tap in a namespace the tour makes and removes.
const (
	tapName = "tvtour0"
	hostIP  = "10.0.2.1"
	guestIP = "10.0.2.15"
)

// guestMAC is fixed so the host side can know it before the guest boots.
var guestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x70, 0x75, 0x72}

// Options say what to boot.
type Options struct {
	Kernel, Initrd string
	// Log gets progress lines and tinyvmm's notices.
	Log io.Writer
}

// Result is what one tour run produced.
type Result struct {
	Events []Event
	Stats  virtionet.Stats
	// Ping is ping's own report from the guest's console.
	Ping []string
	// Elapsed is the whole run: boot, ping, power-off.
	Elapsed time.Duration
}

// Run boots the guest with a NIC on a tap inside a new network namespace,
// has it ping the host once, and returns the trace and counters. Both ARP
// entries are set beforehand, so the only frames are the echo request and
// its reply. The namespace is removed before Run returns.
func Run(ctx context.Context, o Options) (Result, error) {
	var res Result
	if h := kvm.Detect(); !h.Usable {
		return res, errors.New(h.Why)
	} else if h.PVM {
		return res, errors.New("host KVM is PVM: a Linux guest's user space cannot run here")
	}
	if why := scratchns.Usable(); why != "" {
		return res, errors.New(why)
	}
	ns, err := scratchns.New("tvtour")
	if err != nil {
		return res, err
	}
	defer ns.Close()
	hostMAC, err := ns.AddTap(tapName, hostIP+"/24")
	if err != nil {
		return res, err
	}
	if err := ns.AddNeighbor(tapName, net.ParseIP(guestIP), guestMAC); err != nil {
		return res, err
	}
	fmt.Fprintf(o.Log, "tour: namespace %s, tap %s at %s; booting the guest (%s) to ping it once\n",
		ns.Name, tapName, hostIP, filepath.Base(o.Kernel))

	dir, err := os.MkdirTemp("", "tinyvmm-tour-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	statsFile := filepath.Join(dir, "stats.json")
	var console, trace syncbuf.Buffer
	nc := vmm.NetConfig{Config: virtionet.Config{
		Ifname: tapName, MAC: guestMAC, IO: virtionet.IOUring, Tuning: virtionet.DefaultTuning(), Trace: &trace,
	}}
	start := time.Now()
	var status int
	var runErr error
	ns.Do(func() error {
		status, runErr = vmm.Run(ctx, vmm.Config{
			Kernel: o.Kernel, Initrd: o.Initrd, MemBytes: 256 << 20, CPUs: 1,
			Nets:    []vmm.NetConfig{nc},
			Cmdline: "ip=" + guestIP + "::" + hostIP + ":255.255.255.0::eth0:off",
			Command: []string{"sh", "-c", "arp -s " + hostIP + " " + hostMAC.String() + " && ping -c 1 -W 5 " + hostIP},
			Console: &console, Log: o.Log, Stats: statsFile,
		})
		return nil
	})
	res.Elapsed = time.Since(start)
	for _, l := range strings.Split(console.String(), "\n") {
		if l = strings.TrimRight(l, "\r"); strings.Contains(l, "bytes from") || strings.Contains(l, "packets transmitted") {
			res.Ping = append(res.Ping, l)
		}
	}
	if runErr != nil || status != 0 {
		return res, fmt.Errorf("the guest's ping exited %d (%v); its console:\n%s", status, runErr, console.String())
	}
	raw, err := os.ReadFile(statsFile)
	if err != nil {
		return res, err
	}
	var st struct {
		Nets []virtionet.Stats `json:"nets"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || len(st.Nets) != 1 {
		return res, fmt.Errorf("stats %s: %v", raw, err)
	}
	res.Stats = st.Nets[0]
	res.Events, err = ParseTrace(strings.NewReader(trace.String()))
	return res, err
}
