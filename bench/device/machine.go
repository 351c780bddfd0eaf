package device

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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
	m := Machine{
		CPUs: runtime.NumCPU(), KVM: kvm.Detect().String(), Go: runtime.Version(),
		Date:  time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Level: "device level: the Go virtio driver plays the guest on its own thread, no VM; tap in a namespace of its own",
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = "Linux " + unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func (m Machine) String() string {
	return fmt.Sprintf("machine: %s, %d CPUs, %s, load %s, %s\n%s\n%s",
		m.CPU, m.CPUs, m.Kernel, m.Load, m.Go, m.KVM, m.Level)
}
