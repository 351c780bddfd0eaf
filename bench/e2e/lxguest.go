package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
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
// counters of eth0 as one line of NAME=VALUE, "quit" ends the guest side.
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
			fmt.Fprintln(c, strings.TrimSpace(b.String()))
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
