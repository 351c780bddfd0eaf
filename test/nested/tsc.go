package nested

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Under TCG, L1's TSC is the host's TSC, but L1's kernel often fails to
// calibrate it: the emulated PIT runs unevenly on a loaded host, and a tiny
// kernel has no HPET or ACPI PM timer to fall back on. It then runs with
// tsc_khz = 0, and KVM in L1 never enters a guest (kvm_guest_time_update
// re-requests KVM_REQ_CLOCK_UPDATE forever). Telling L1 the frequency with
// tsc_early_khz= avoids the calibration altogether.
//
// Later, the clocksource watchdog compares the TSC with jiffies, whose ticks
// TCG loses under load, marks the TSC unstable and switches L1 to jiffies:
// every clock_gettime in L1 then moves in 4 ms steps (ping times of 0 us
// and round tens of ms in bench e2e). The TSC is the host's, so tsc=reliable
// keeps it.

// tscParam returns "tsc_early_khz=N tsc=reliable" for the host's TSC, or ""
// when the frequency cannot be read.
func tscParam() string {
	if khz := hostTSCkHz(); khz > 0 {
		return "tsc_early_khz=" + strconv.Itoa(khz) + " tsc=reliable"
	}
	return ""
}

// hostTSCkHz reads the TSC frequency: tsc_freq_khz where the kernel exports
// it, else the first "cpu MHz" of /proc/cpuinfo (the TSC rate on machines
// with an invariant TSC, and on VMs).
func hostTSCkHz() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		if khz, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && khz > 0 {
			return khz
		}
	}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	return cpuinfoMHz(bufio.NewScanner(f))
}

// cpuinfoMHz parses the first "cpu MHz : 2096.024" line into kHz.
func cpuinfoMHz(sc *bufio.Scanner) int {
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || mhz <= 0 {
			return 0
		}
		return int(mhz*1000 + 0.5)
	}
	return 0
}
