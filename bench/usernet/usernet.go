// Package usernetbench is `tinyvmm-lab bench usernet`: guest-to-host TCP throughput
// over --net user (usernet's gVisor gateway).
//
// The guest sends SIZE MiB of zeros with busybox (`dd | nc 10.0.2.2
// PORT`) to a listener on the host's 127.0.0.1, RUNS times in one boot;
// the host times each connection from its first byte to its end, so the
// boot is not counted. The same transfer from a Go client on the host's
// loopback is the ceiling beside it. Everything runs in a network
// namespace the benchmark creates (root), whose loopback is the only
// network: the guest's traffic cannot leave through the NAT.
package usernetbench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"time"

	"tinyvmm/bench/tinyvmmbin"
	"tinyvmm/internal/cliflag"
	"tinyvmm/internal/scratchns"
	"tinyvmm/userproc"
)

// Transfer is one timed connection.
type Transfer struct {
	Bytes   int64
	Elapsed time.Duration // first byte to end of data
}

// MiBs is the transfer's rate in MiB/s.
func (t Transfer) MiBs() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Bytes) / (1 << 20) / t.Elapsed.Seconds()
}

// MainUsernet runs the benchmark.
func MainUsernet(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench usernet", flag.ContinueOnError)
	size := fs.Int("size", 64, "`MiB` sent per run")
	runs := fs.Int("runs", 3, "transfers in the guest's one boot (the median is reported)")
	netSpec := fs.String("net", "user", "the --net of the guest (e.g. user,mtu=9000)")
	extra := fs.String("run-args", "", "extra `ARGS` for tinyvmm run, space-separated (e.g. --mem 512M)")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench usernet", "Usage: tinyvmm bench usernet [flags]   guest->host TCP throughput over --net user vs the host's loopback\n\nFlags:", args, stdout); help || err != nil {
		return err
	}
	if *size < 1 || *runs < 1 {
		return cliflag.Usagef("--size and --runs must be at least 1")
	}
	if !strings.HasPrefix(*netSpec, "user") {
		return cliflag.Usagef("--net %q: this benchmark is for a user network (user[,...])", *netSpec)
	}
	if why := scratchns.Usable(); why != "" {
		return fmt.Errorf("bench usernet %s (it runs in a network namespace of its own)", why)
	}
	ns, err := scratchns.New("tvbu")
	if err != nil {
		return err
	}
	defer ns.Close()
	bytes := int64(*size) << 20

	ceiling, err := loopbackCeiling(ns, bytes, *runs)
	if err != nil {
		return fmt.Errorf("host loopback: %v", err)
	}

	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp4", "127.0.0.1:0"); return }); err != nil {
		return err
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got := make(chan []Transfer, 1)
	go func() { got <- receive(ln, *runs) }()

	vmm, err := tinyvmmbin.Path()
	if err != nil {
		return err
	}
	runArgs := append([]string{"run", "--net", *netSpec, "--timeout", "20m"}, strings.Fields(*extra)...)
	runArgs = append(runArgs, "--", "sh", "-c", GuestScript(*size, *runs, port))
	cmd := exec.Command(vmm, runArgs...)
	var console strings.Builder
	cmd.Stdout, cmd.Stderr = &console, stderr
	if err := ns.Do(cmd.Start); err != nil {
		return err
	}
	runErr := cmd.Wait()
	ln.Close() // ends receive if the guest sent fewer runs
	guest := <-got
	if runErr != nil || len(guest) < *runs {
		return fmt.Errorf("guest: %v after %d of %d transfers; its console:\n%s", runErr, len(guest), *runs, tail(console.String(), 20))
	}
	for i, tr := range guest {
		if tr.Bytes != bytes {
			return fmt.Errorf("guest transfer %d: %d bytes arrived, %d sent", i+1, tr.Bytes, bytes)
		}
	}
	fmt.Fprintf(stdout, "guest -> host TCP over --net %s: %d MiB per run, %d runs (MiB/s)\n", *netSpec, *size, *runs)
	fmt.Fprintf(stdout, "%-34s %10s   %s\n", "", "median", "runs")
	for _, row := range []struct {
		name string
		t    []Transfer
	}{
		{"guest dd | nc 10.0.2.2 (--net user)", guest},
		{"host Go client on 127.0.0.1", ceiling},
	} {
		fmt.Fprintf(stdout, "%-34s %10.1f   %s\n", row.name, median(row.t), rates(row.t))
	}
	fmt.Fprintf(stdout, "guest/host %34.1f%%\n", 100*median(guest)/median(ceiling))
	return nil
}

// GuestScript is what the guest runs: runs transfers of size MiB to the
// gateway's port (the host's 127.0.0.1), stopping at the first failure.
func GuestScript(size, runs, port int) string {
	return fmt.Sprintf("i=0; while [ $i -lt %d ]; do dd if=/dev/zero bs=1M count=%d 2>/dev/null | nc %s %d || exit 1; i=$((i+1)); done",
		runs, size, userproc.GatewayIP, port)
}

// receive accepts up to n connections one after another and times each
// from its first byte to its end of data.
func receive(ln net.Listener, n int) []Transfer {
	var out []Transfer
	buf := make([]byte, 256<<10)
	for len(out) < n {
		c, err := ln.Accept()
		if err != nil {
			return out
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Minute))
		var tr Transfer
		var first time.Time
		for {
			k, err := c.Read(buf)
			if k > 0 {
				if tr.Bytes == 0 {
					first = time.Now()
				}
				tr.Bytes += int64(k)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					tr.Elapsed = time.Since(first)
				}
				break
			}
		}
		c.Close()
		out = append(out, tr)
	}
	return out
}

// loopbackCeiling is the same transfer from a Go client on the host's
// loopback, inside ns: what the host side alone can take.
func loopbackCeiling(ns *scratchns.NS, bytes int64, runs int) ([]Transfer, error) {
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp4", "127.0.0.1:0"); return }); err != nil {
		return nil, err
	}
	defer ln.Close()
	got := make(chan []Transfer, 1)
	go func() { got <- receive(ln, runs) }()
	buf := make([]byte, 1<<20)
	for i := 0; i < runs; i++ {
		var c net.Conn
		if err := ns.Do(func() (err error) { c, err = net.Dial("tcp4", ln.Addr().String()); return }); err != nil {
			return nil, err
		}
		for sent := int64(0); sent < bytes; sent += int64(len(buf)) {
			if _, err := c.Write(buf[:min(int64(len(buf)), bytes-sent)]); err != nil {
				c.Close()
				return nil, err
			}
		}
		c.Close()
	}
	out := <-got
	if len(out) != runs {
		return nil, fmt.Errorf("%d of %d transfers arrived", len(out), runs)
	}
	return out, nil
}

func median(ts []Transfer) float64 {
	var r []float64
	for _, t := range ts {
		r = append(r, t.MiBs())
	}
	slices.Sort(r)
	return r[len(r)/2]
}

func rates(ts []Transfer) string {
	var s []string
	for _, t := range ts {
		s = append(s, fmt.Sprintf("%.1f", t.MiBs()))
	}
	return strings.Join(s, " ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
