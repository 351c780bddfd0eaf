package usernetd

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/stats"
	"tinyvmm/userproc"
)

// BenchmarkBulkTCPUserNetVsTap is the device-level check of the user
// network against the host's own stack: the same bulk TCP transfer, 16 MiB
// each way, from a Linux stack playing the guest (a tap in a namespace of
// its own, 10.0.2.15, TSO and checksum offload as a virtio-net guest would
// use them) to a host socket, by two paths that differ only past the
// link:
//
//	user  the guest's frames cross the link (a SOCK_SEQPACKET socketpair)
//	      to the user network's gateway stack, which splices the
//	      connection to a socket on the host's 127.0.0.1
//	tap   the guest's frames go into a second tap, in the host's namespace
//	      at 10.0.2.2, as tinyvmm's --net tap writes them: the host's
//	      kernel stack takes them to the socket
//
// Each path is fed by the same frame pump (one read and one write per
// frame: the device's part). The runs are interleaved; each iteration
// moves 16 MiB each way over each path on a new connection, and the
// metrics are the medians over the iterations, with the ratio user/tap.
// The CPU per MiB is the whole process's (both stacks, the pump, the
// gateway, the endpoints: everything either path runs is in it), a count
// that a loaded machine disturbs less than the rates. Run with
// -benchtime=5x or more.
func BenchmarkBulkTCPUserNetVsTap(b *testing.B) {
	const size = 16 << 20
	user, tap := userPath(b), tapPath(b)
	paths := []*bulkPath{user, tap}
	for b.Loop() {
		for _, p := range paths {
			rate, cpu := p.transfer(b, size, true)
			p.h2g, p.h2gCPU = append(p.h2g, rate), append(p.h2gCPU, cpu)
			rate, cpu = p.transfer(b, size, false)
			p.g2h, p.g2hCPU = append(p.g2h, rate), append(p.g2hCPU, cpu)
		}
	}
	for _, p := range paths {
		b.ReportMetric(stats.Median(p.h2g), p.name+"-h2g-MiB/s")
		b.ReportMetric(stats.Median(p.g2h), p.name+"-g2h-MiB/s")
		b.ReportMetric(stats.Median(p.h2gCPU), p.name+"-h2g-CPU-ms/MiB")
		b.ReportMetric(stats.Median(p.g2hCPU), p.name+"-g2h-CPU-ms/MiB")
	}
	b.ReportMetric(stats.Median(user.h2g)/stats.Median(tap.h2g), "h2g-user/tap")
	b.ReportMetric(stats.Median(user.g2h)/stats.Median(tap.g2h), "g2h-user/tap")
	b.ReportMetric(0, "ns/op") // an iteration is four transfers: its time says nothing
}

// bulkPath is one way from the guest's namespace to a host listener.
type bulkPath struct {
	name     string
	guest    func(func() error) error // runs f in the guest's namespace
	ln       net.Listener             // the host's end
	dialAddr string                   // what the guest dials
	h2g, g2h []float64                // MiB/s of each transfer
	// the process's CPU time per MiB of each transfer, in ms
	h2gCPU, g2hCPU []float64
}

// transfer moves size bytes over a new connection, host to guest (h2g)
// or guest to host, and returns the rate from the first byte written to
// the last one read, and the CPU time the process used meanwhile per MiB.
func (p *bulkPath) transfer(b *testing.B, size int64, h2g bool) (mibs, cpuMs float64) {
	b.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	acc := make(chan result, 1)
	go func() { c, err := p.ln.Accept(); acc <- result{c, err} }()
	var gc net.Conn
	if err := p.guest(func() (err error) {
		gc, err = net.DialTimeout("tcp4", p.dialAddr, 20*time.Second)
		return
	}); err != nil {
		b.Fatalf("%s: dial %s: %v", p.name, p.dialAddr, err)
	}
	defer gc.Close()
	r := <-acc
	if r.err != nil {
		b.Fatalf("%s: accept: %v", p.name, r.err)
	}
	hc := r.c
	defer hc.Close()
	from, to := gc, hc
	if h2g {
		from, to = hc, gc
	}
	deadline := time.Now().Add(90 * time.Second)
	from.SetDeadline(deadline)
	to.SetDeadline(deadline)
	start, cpu0 := time.Now(), processCPU()
	werr := make(chan error, 1)
	go func() {
		_, err := io.Copy(from, io.LimitReader(zeroReader{}, size))
		from.(*net.TCPConn).CloseWrite()
		werr <- err
	}()
	n, err := io.Copy(io.Discard, to)
	d, cpu := time.Since(start), processCPU()-cpu0
	if err := <-werr; err != nil {
		b.Fatalf("%s: write: %v", p.name, err)
	}
	if err != nil || n != size {
		b.Fatalf("%s: received %d bytes (%v), want %d", p.name, n, err, size)
	}
	return float64(size>>20) / d.Seconds(), float64(cpu) / 1e6 / float64(size>>20)
}

// processCPU is the CPU time, user and system, the process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// guestTap makes the guest's namespace with its tap at GuestIP, opened
// with the offloads the user network takes, and pumps its frames to and
// from fd (the path's other end) until the benchmark ends.
func guestTap(b *testing.B, fd int) (do func(func() error) error, mac net.HardwareAddr) {
	ns, mac, tapFd := tapNS(b, "tvg0", GuestIP+"/24", userproc.Offloads)
	pumpBoth(b, tapFd, fd) // stopped before the fds close
	return ns.Do, mac
}

// pumpBoth copies frames both ways between x and y until the benchmark
// ends.
func pumpBoth(b *testing.B, x, y int) { runPumps(b, bothWays(x, y)...) }

// bothWays are the pumps that copy frames from x to y and from y to x,
// their super-frames uncounted.
func bothWays(x, y int) []func(ctx context.Context) {
	var xy, yx superFrames
	return []func(ctx context.Context){
		func(ctx context.Context) { pump(ctx, x, y, &xy) },
		func(ctx context.Context) { pump(ctx, y, x, &yx) },
	}
}

// userPath is the guest behind the user network, reaching the host's
// 127.0.0.1 through the gateway (GatewayIP).
func userPath(b *testing.B) *bulkPath {
	ln, port := hostListener(b)
	// The link is set up as tinyvmm sets it up; its MAC is the tap's,
	// known once the tap exists, so the Backend opens after it: the
	// pump starts on a socketpair end the Backend then serves.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	userproc.SetSendBuffer(fds[0], sockBuf)
	unix.SetNonblock(fds[0], true)
	b.Cleanup(func() { unix.Close(fds[0]) })
	do, mac := guestTap(b, fds[0])
	be, err := Attach(fds[1], Config{MAC: mac})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	if err := unix.Send(fds[0], []byte{userproc.OffloadMsg, userproc.Offloads}, 0); err != nil {
		b.Fatal(err)
	}
	return &bulkPath{name: "user", guest: do, ln: ln, dialAddr: GatewayIP + ":" + port}
}

// tapPath is the guest behind a tap of the host's own stack: the host is
// a namespace of its own with a tap at GatewayIP.
func tapPath(b *testing.B) *bulkPath {
	host, _, hostFd := tapNS(b, "tvh0", GatewayIP+"/24", userproc.Offloads)
	var ln net.Listener
	if err := host.Do(func() (err error) { ln, err = net.Listen("tcp4", GatewayIP+":0"); return }); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	do, _ := guestTap(b, hostFd)
	return &bulkPath{name: "tap", guest: do, ln: ln, dialAddr: ln.Addr().String()}
}
