package device

import (
	"fmt"
	"runtime"
	"time"
	"tinyvmm/internal/hostinfo"

	"tinyvmm/kvm"
)

// Machine describes where the numbers come from.
type Machine struct {
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel"`
	Load   string `json:"load_avg"`
	KVM    string `json:"kvm"`
	Go     string `json:"go"`
	Date   string `json:"date"`
	Level  string `json:"level"`
}

func describeMachine() Machine {
	h := hostinfo.Describe()
	return Machine{
		CPU: h.CPU, CPUs: h.CPUs, Kernel: h.Kernel, Load: h.LoadAvg,
		KVM: kvm.Detect().String(), Go: runtime.Version(),
		Date:  time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Level: "device level: the Go virtio driver plays the guest on its own thread, no VM; tap in a namespace of its own",
	}
}

func (m Machine) String() string {
	return fmt.Sprintf("machine: %s, %d CPUs, %s, load %s, %s\n%s\n%s",
		m.CPU, m.CPUs, m.Kernel, m.Load, m.Go, m.KVM, m.Level)
}
