package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The guest side of the Linux-guest cells (linux.go): `tinyvmm-lab bench e2e
// lxguest`, the guest's command. It starts iperf3's server, answers the
// request/response client (rrServe) and serves a control port where the
// harness reads the driver's counters and ends the run; the console gets
// the BENCH lines the harness waits for, as the bench guest's.

// lxIfname is the guest's NIC, whose driver counters "stats" reads (a
// variable for the tests).
var lxIfname = "eth0"

// Ports of the Linux guest's servers.
const (
	lxIperfPort   = 5201 // iperf3's default
	lxRRPort      = 5301
	lxControlPort = 5302
)

// MainLXGuest runs the guest side until the harness says quit. iperf3 is
// the one in $PATH (the guest's initramfs has it with its libraries).
func MainLXGuest(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("bench e2e lxguest takes no arguments, got %q", args)
	}
	// -4: the project's kernel has no IPv6, where iperf3 would listen by default.
	iperf := exec.Command("iperf3", "-s", "-4", "-p", fmt.Sprint(lxIperfPort))
	if err := iperf.Start(); err != nil {
		return fmt.Errorf("iperf3 -s: %w", err)
	}
	defer func() {
		_ = iperf.Process.Kill()
		_ = iperf.Wait()
	}()
	rr, err := net.Listen("tcp4", fmt.Sprintf(":%d", lxRRPort))
	if err != nil {
		return err
	}
	defer rr.Close()
	go rrServe(rr)
	ctl, err := net.Listen("tcp4", fmt.Sprintf(":%d", lxControlPort))
	if err != nil {
		return err
	}
	defer ctl.Close()
	// Wait until iperf3 listens, bounded like a boot. Not by connecting
	// to it: iperf3's server takes any connection for a test's control
	// connection, and the first real test would then fail.
	for deadline := time.Now().Add(30 * time.Second); !tcpListening(lxIperfPort); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("iperf3's server did not listen on port %d in 30 s", lxIperfPort)
		}
	}
	fmt.Fprintf(stdout, "BENCH ready mode=linux\n")
	for {
		c, err := ctl.Accept()
		if err != nil {
			return err
		}
		quit := lxControl(c)
		c.Close()
		if quit {
			break
		}
	}
	fmt.Fprintf(stdout, "BENCH result mode=linux ok=1\nBENCH exit status=0\n")
	return nil
}

// tcpListening says whether a socket of this network namespace listens
// on TCP port (state 0A in /proc/net/tcp or tcp6 of the calling thread).
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// lxControl answers one control connection: "stats" gets the driver's
// counters of eth0 and the guest kernel's (guestCounters) as one line of
// NAME=VALUE, "sysinfo" what the guest was given and chose (sysinfo) as
// one line of JSON, "quit" ends the guest side.
func lxControl(c net.Conn) (quit bool) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		switch strings.TrimSpace(sc.Text()) {
		case "stats":
			st, err := ethtoolStats(lxIfname)
			if err != nil {
				fmt.Fprintf(c, "error %v\n", err)
				continue
			}
			var b strings.Builder
			for k, v := range st {
				fmt.Fprintf(&b, "%s=%d ", k, v)
			}
			for k, v := range guestCounters("/proc") {
				fmt.Fprintf(&b, "%s=%d ", k, v)
			}
			fmt.Fprintln(c, strings.TrimSpace(b.String()))
		case "sysinfo":
			j, _ := json.Marshal(sysinfo("/", lxIfname)) // a map of strings always marshals
			fmt.Fprintf(c, "%s\n", j)
		case "quit":
			fmt.Fprintln(c, "bye")
			return true
		default:
			fmt.Fprintln(c, "error unknown command")
		}
	}
	return false
}

// rrSize is the request and the response of the request/response cells:
// netperf TCP_RR's default of one byte each way.
const rrSize = 1

// rrServe answers each request of rrSize bytes with as many, on every
// connection, until ln closes.
func rrServe(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			buf := make([]byte, rrSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// From linux/ethtool.h; x/sys/unix does not name them all.
const (
	ethtoolGStrings = 0x1b // ETHTOOL_GSTRINGS
	ethSSStats      = 1    // ETH_SS_STATS
	ethGStringLen   = 32   // ETH_GSTRING_LEN
)

// ethtoolStats reads an interface's driver statistics (ethtool -S) with
// the SIOCETHTOOL ioctl: virtio-net counts its notifies per queue there
// (rx_queue_N_kicks, tx_queue_N_kicks).
func ethtoolStats(ifname string) (map[string]uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	ioctl := func(data unsafe.Pointer) error {
		var ifr struct {
			name [unix.IFNAMSIZ]byte
			data uintptr
			_    [16]byte
		}
		copy(ifr.name[:], ifname)
		ifr.data = uintptr(data)
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return e
		}
		return nil
	}
	// ETHTOOL_GSSET_INFO: how many ETH_SS_STATS strings.
	info := struct {
		cmd, reserved uint32
		mask          uint64
		n             uint32
	}{cmd: unix.ETHTOOL_GSSET_INFO, mask: 1 << ethSSStats}
	if err := ioctl(unsafe.Pointer(&info)); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSSET_INFO %s: %w", ifname, err)
	}
	if info.mask == 0 || info.n == 0 || info.n > 4096 {
		return nil, errors.New("no driver statistics")
	}
	n := int(info.n)
	strs := make([]byte, 12+n*ethGStringLen)
	*(*uint32)(unsafe.Pointer(&strs[0])) = ethtoolGStrings
	*(*uint32)(unsafe.Pointer(&strs[4])) = ethSSStats
	*(*uint32)(unsafe.Pointer(&strs[8])) = uint32(n)
	if err := ioctl(unsafe.Pointer(&strs[0])); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTRINGS %s: %w", ifname, err)
	}
	vals := make([]uint64, 1+n) // struct ethtool_stats: cmd, n_stats, then the u64s
	*(*uint32)(unsafe.Pointer(&vals[0])) = unix.ETHTOOL_GSTATS
	*(*uint32)(unsafe.Pointer(uintptr(unsafe.Pointer(&vals[0])) + 4)) = uint32(n)
	if err := ioctl(unsafe.Pointer(&vals[0])); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTATS %s: %w", ifname, err)
	}
	st := map[string]uint64{}
	for i := 0; i < n; i++ {
		name := strs[12+i*ethGStringLen : 12+(i+1)*ethGStringLen]
		if j := strings.IndexByte(string(name), 0); j >= 0 {
			name = name[:j]
		}
		st[string(name)] = vals[1+i]
	}
	return st, nil
}

// guestCounters are the guest kernel's counters the harness takes per
// frame: its interrupts by source (irq_NAME: the name /proc/interrupts
// gives, such as irq_virtio0-input.0 or irq_LOC, summed over the CPUs),
// its CPU time in ticks (cpu_user, cpu_system, cpu_idle, cpu_irq,
// cpu_softirq, cpu_steal; /proc/stat) and its context switches (ctxt).
// What cannot be read is left out.
func guestCounters(proc string) map[string]uint64 {
	m := map[string]uint64{}
	if b, err := os.ReadFile(proc + "/interrupts"); err == nil {
		for k, v := range parseInterrupts(b) {
			m["irq_"+k] = v
		}
	}
	if b, err := os.ReadFile(proc + "/stat"); err == nil {
		for k, v := range parseProcStat(b) {
			m[k] = v
		}
	}
	return m
}

// parseInterrupts sums each row of /proc/interrupts over the CPUs of its
// header: a numbered row is named by its last word (the handler's name,
// like virtio0-input.0), the others by their label (LOC, RES, CAL, ...).
// A name with '=' in it, which a NAME=VALUE line cannot carry, is left out.
func parseInterrupts(b []byte) map[string]uint64 {
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 {
		return nil
	}
	ncpu := len(strings.Fields(lines[0]))
	m := map[string]uint64{}
	for _, line := range lines[1:] {
		label, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		label = strings.TrimSpace(label)
		f := strings.Fields(rest)
		var sum uint64
		n := 0
		for ; n < ncpu && n < len(f); n++ {
			v, err := strconv.ParseUint(f[n], 10, 64)
			if err != nil {
				break
			}
			sum += v
		}
		if n == 0 {
			continue
		}
		name := label
		if _, err := strconv.Atoi(label); err == nil {
			if len(f) <= n {
				continue
			}
			name = f[len(f)-1]
		}
		if name == "" || strings.ContainsAny(name, "= ") {
			continue
		}
		m[name] += sum
	}
	return m
}

// procStatCPU names /proc/stat's "cpu" fields, in order.
var procStatCPU = []string{"cpu_user", "cpu_nice", "cpu_system", "cpu_idle", "cpu_iowait", "cpu_irq", "cpu_softirq", "cpu_steal"}

// parseProcStat reads the all-CPU "cpu" line (ticks) and "ctxt" of
// /proc/stat.
func parseProcStat(b []byte) map[string]uint64 {
	m := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "cpu":
			for i, name := range procStatCPU {
				if i+1 >= len(f) {
					break
				}
				if v, err := strconv.ParseUint(f[i+1], 10, 64); err == nil {
					m[name] = v
				}
			}
		case "ctxt":
			if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				m["ctxt"] = v
			}
		}
	}
	return m
}

// sysinfoKmsg picks the boot log's lines that say what the guest kernel
// made of the machine: its clocks and timers, the APIC and its mode, the
// hypervisor's paravirtual features, the NIC and its interrupts.
var sysinfoKmsg = regexp.MustCompile(`(?i)kvm|clock|apic|tsc|timer|hpet|pit|virtio|msi|steal|paravirt|pv |hypervisor|idle|poll|eoi|irq`)

// sysinfo is what the guest under a VMM was given and what it chose, for
// comparing two VMMs' guests (root is /; ifname the NIC): the clocksource
// and clock event devices, the kernel command line, the virtio features
// the driver and device agreed on (the bit string of the device's
// features file, bit 0 first), the CPU flags (CPUID as the kernel reads
// it), the interrupt rows, the boot log's lines of sysinfoKmsg and the
// cpuidle driver. A file it cannot read is left out.
func sysinfo(root, ifname string) map[string]string {
	m := map[string]string{}
	for k, path := range map[string]string{
		"clocksource":  "sys/devices/system/clocksource/clocksource0/current_clocksource",
		"clocksources": "sys/devices/system/clocksource/clocksource0/available_clocksource",
		"clockevent":   "sys/devices/system/clockevents/clockevent0/current_device",
		"broadcast":    "sys/devices/system/clockevents/broadcast/current_device",
		"cpuidle":      "sys/devices/system/cpu/cpuidle/current_driver",
		"cmdline":      "proc/cmdline",
		"features":     "sys/class/net/" + ifname + "/device/features",
		"interrupts":   "proc/interrupts",
	} {
		if b, err := os.ReadFile(filepath.Join(root, path)); err == nil {
			m[k] = strings.Join(strings.Fields(string(b)), " ")
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "proc/cpuinfo")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
				m["cpu_flags"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if lines := readKmsg(filepath.Join(root, "dev/kmsg"), sysinfoKmsg, 16<<10); len(lines) > 0 {
		m["kmsg"] = strings.Join(lines, " | ")
	}
	return m
}

// readKmsg reads the kernel's log from path (/dev/kmsg: one record per
// read, "PRIO,SEQ,USEC,FLAGS;MESSAGE" and continuation lines), without
// waiting for more, and returns the messages that match re, at most max
// bytes of them.
func readKmsg(path string, re *regexp.Regexp, max int) []string {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var out []string
	total := 0
	buf := make([]byte, 8192)
	for i := 0; i < 100000; i++ {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EPIPE) {
			continue // records overwritten since the last read
		}
		if err != nil || n <= 0 {
			break
		}
		rec, _, _ := strings.Cut(string(buf[:n]), "\n")
		_, msg, ok := strings.Cut(rec, ";")
		if !ok || !re.MatchString(msg) {
			continue
		}
		if total+len(msg) > max {
			break
		}
		out = append(out, msg)
		total += len(msg)
	}
	return out
}
