package usernetd

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawIOChild, in the environment, makes the test binary the echo process
// TestRawIOLeavesSysmonAsleep measures: it dials that address.
const rawIOChild = "TINYVMM_RAWIO_TEST_CHILD"

// A process with GOMAXPROCS at 1 that echoes what comes on a host
// connection (hostConn), a byte at a time with idle spells between, as
// the child serves frames: each byte should cost it one wakeup, its one
// thread waking from the poller, where Go's ordinary system calls also
// woke sysmon from its deep sleep, each time. Its voluntary context
// switches per byte tell the two apart.
func TestRawIOLeavesSysmonAsleep(t *testing.T) {
	if addr := os.Getenv(rawIOChild); addr != "" {
		rawIOEcho(addr)
		return
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc:", err)
	}
	goCalls, raw := echoSwitches(t, true), echoSwitches(t, false)
	t.Logf("the echo's voluntary context switches per byte: %.2f with Go's system calls, %.2f raw", goCalls, raw)
	if raw > 0.75*goCalls {
		t.Errorf("raw I/O costs %.2f switches per byte, Go's system calls %.2f: want at most three quarters", raw, goCalls)
	}
}

// echoSwitches starts the echo process and returns its voluntary context
// switches per byte echoed.
func echoSwitches(t *testing.T, goSyscalls bool) float64 {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRawIOLeavesSysmonAsleep$")
	cmd.Env = append(os.Environ(), rawIOChild+"="+ln.Addr().String(), "GOMAXPROCS=1")
	if goSyscalls {
		cmd.Env = append(cmd.Env, GoSyscallsEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, 1)
	exchange := func() {
		time.Sleep(2 * time.Millisecond) // the echo idles: sysmon sleeps deeply
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		exchange()
	}
	const n = 300
	before := processSwitches(t, cmd.Process.Pid)
	for range n {
		exchange()
	}
	return float64(processSwitches(t, cmd.Process.Pid)-before) / n
}

// rawIOEcho dials addr and echoes each byte through hostConn.
func rawIOEcho(addr string) {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		os.Exit(1)
	}
	hc := hostConn(c)
	buf := make([]byte, 1)
	for {
		if _, err := hc.Read(buf); err != nil {
			os.Exit(0)
		}
		if _, err := hc.Write(buf); err != nil {
			os.Exit(0)
		}
	}
}

// processSwitches sums the voluntary context switches of pid's threads.
func processSwitches(t *testing.T, pid int) uint64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, e := range ents {
		f, err := os.Open(dir + e.Name() + "/status")
		if err != nil {
			continue // gone
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				sum += n
			}
		}
		f.Close()
	}
	return sum
}
