// Package hostinfo describes the machine a benchmark ran on, for its
// report: the numbers mean little without it.
package hostinfo

import (
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Info is the machine's name, CPU model and count, kernel and load.
type Info struct {
	Host    string `json:"host"`
	CPU     string `json:"cpu"`
	CPUs    int    `json:"cpus"`
	Kernel  string `json:"kernel"`
	LoadAvg string `json:"loadavg_at_start"`
}

// Describe reads Info from uname and /proc; what it cannot read stays empty.
func Describe() Info {
	m := Info{CPUs: runtime.NumCPU()}
	m.Host, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}
