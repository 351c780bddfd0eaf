package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/schedstat"
)

// rx64pg's sender: the kernel's packet generator, as the seeds' rx tests
// used it (seed 004: pktgen into the tap, the guest dropping). A kernel
// thread on the sender's CPU builds each frame and hands it to the tap's
// xmit, and it never waits: what the device has not taken when the tap's
// queue is full is dropped there. Sharing a CPU with the device, it is
// always runnable, so the scheduler gives the device its fair share and
// the pps measure the device's cost alone (the ratio of two VMMs is that
// of their CPU per frame, as with a sender on a CPU of its own). The
// socket sender waits for the device instead, and its own CPU per frame
// adds to the device's (rx64). pktgen is per network namespace: each has
// its /proc/net/pktgen and its own threads.

// pktgenDir is pktgen's control directory of the calling thread's
// namespace (/proc/net would be the process's).
const pktgenDir = "/proc/thread-self/net/pktgen"

// pktgenHere says whether this kernel has pktgen: built in, or loaded.
func pktgenHere() bool {
	_, err := os.Stat("/proc/net/pktgen")
	return err == nil
}

var errNoPktgen = errors.New("no pktgen in this kernel (CONFIG_NET_PKTGEN; on a host, modprobe pktgen)")

// pktgenWrite writes one command to one of pktgen's files, as a line:
// pgctrl takes the last byte written for the newline and drops it.
func pktgenWrite(file, cmd string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(cmd + "\n"); err != nil {
		return fmt.Errorf("pktgen %s: %q: %w", filepath.Base(file), cmd, err)
	}
	return nil
}

// pktgenCommands configure a device's flood: frames of size bytes, the
// bench's addresses and ports, as fast as the tap takes them, without
// timestamps (a clock read per frame). pktgen cannot reuse an skb on a
// tap (it holds it until read: no IFF_TX_SKB_SHARING), so clone_skb is 0.
func pktgenCommands(dstMAC net.HardwareAddr, size int, count uint64) []string {
	return []string{
		"clone_skb 0", "burst 1", "delay 0",
		"count " + strconv.FormatUint(count, 10),
		"pkt_size " + strconv.Itoa(size),
		"dst_mac " + dstMAC.String(),
		"dst " + GuestIP.String(),
		"src_min " + HostIP.String(), "src_max " + HostIP.String(),
		fmt.Sprintf("udp_src_min %d", udpSrc), fmt.Sprintf("udp_src_max %d", udpSrc),
		fmt.Sprintf("udp_dst_min %d", udpDst), fmt.Sprintf("udp_dst_max %d", udpDst),
		"flag NO_TIMESTAMP",
	}
}

var pktgenCounts = regexp.MustCompile(`pkts-sofar: (\d+)\s+errors: (\d+)`)

// parsePktgenCounts reads a device file's frames sent and errors (frames
// the tap dropped: its queue was full).
func parsePktgenCounts(s string) (sent, errs uint64, err error) {
	m := pktgenCounts.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("pktgen: no pkts-sofar in %q", s)
	}
	sent, _ = strconv.ParseUint(m[1], 10, 64)
	errs, _ = strconv.ParseUint(m[2], 10, 64)
	return sent, errs, nil
}

// kthreadsNamed lists the tasks called name (kernel threads have no
// namespace of their own: each namespace's kpktgend_N has the same name,
// and only the one at work accrues CPU time).
func kthreadsNamed(name string) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm")); err == nil && strings.TrimSpace(string(b)) == name {
			pids = append(pids, pid)
		}
	}
	return pids
}

func tasksCPU(pids []int) (ns uint64) {
	for _, p := range pids {
		ns += schedstat.TaskCPU(p)
	}
	return ns
}

// firstCPU is the first CPU this process may use, which with --pin is one
// of those kept off the vCPU's: where a sender runs, and where
// MeasureSwitchCost times its round trips.
func firstCPU() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, err
	}
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			return c, nil
		}
	}
	return 0, errors.New("no CPU in this process's affinity")
}

// PktgenFlood has the namespace's pktgen flood the tap with size-byte
// frames for dstMAC for dur, from its thread on the sender's CPU. Sent
// counts the frames the tap took; its CPU is the pktgen thread's.
func PktgenFlood(ns *Namespace, dstMAC net.HardwareAddr, size int, dur time.Duration, maxFrames uint64) (SendResult, error) {
	if size < FrameMin || size > FrameMax {
		return SendResult{}, fmt.Errorf("frame size %d outside %d..%d", size, FrameMin, FrameMax)
	}
	cpu, err := firstCPU() // the sender's
	if err != nil {
		return SendResult{}, err
	}
	thread := fmt.Sprintf("kpktgend_%d", cpu)
	threadFile, dev, ctrl := filepath.Join(pktgenDir, thread), filepath.Join(pktgenDir, TapName), filepath.Join(pktgenDir, "pgctrl")
	err = ns.Do(func() error {
		if _, err := os.Stat(pktgenDir); err != nil {
			return errNoPktgen
		}
		if err := pktgenWrite(threadFile, "rem_device_all"); err != nil {
			return err
		}
		if err := pktgenWrite(threadFile, "add_device "+TapName); err != nil {
			return err
		}
		for _, c := range pktgenCommands(dstMAC, size, maxFrames) {
			if err := pktgenWrite(dev, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return SendResult{}, err
	}
	// "start" returns once pktgen stops: at count, or at "stop" from
	// another thread of the namespace.
	pids := kthreadsNamed(thread)
	start, cpu0 := time.Now(), tasksCPU(pids)
	done := make(chan error, 1)
	go func() {
		done <- ns.Do(func() error { return pktgenWrite(ctrl, "start") })
	}()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(dur):
		if err := ns.Do(func() error { return pktgenWrite(ctrl, "stop") }); err != nil {
			return SendResult{}, err
		}
		runErr = <-done
	}
	res := SendResult{Duration: time.Since(start), CPU: time.Duration(tasksCPU(pids) - cpu0)}
	if runErr != nil {
		return res, runErr
	}
	err = ns.Do(func() error {
		b, err := os.ReadFile(dev)
		if err != nil {
			return err
		}
		res.Sent, res.Dropped, err = parsePktgenCounts(string(b))
		return err
	})
	return res, err
}
