package usernetd

import (
	"bufio"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"tinyvmm/internal/schedstat"
	"tinyvmm/userproc"
	"tinyvmm/userproc/userproctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	userproctest.Cleanup()
	os.Exit(code)
}

// BenchmarkRoundTripThroughChild is one connection of bench usernet's rr
// cell (connect, a short request, the answer, the server's close) from a
// Linux stack playing the guest (a tap in a namespace of its own, frames
// pumped to and from the link as the device moves them) through
// tinyvmm-usernet, the real child process, to a server on the host's
// 127.0.0.1. Per connection it reports the child's context switches
// (voluntary: it slept and was woken; involuntary: it was preempted) and
// CPU time. In the nested L1 each switch between processes is dear and
// the rr cell's time follows their count (bench/RESULTS.md, "Where a
// round trip's context switches are"); here the counts can be taken in
// seconds, without a VM.
func BenchmarkRoundTripThroughChild(b *testing.B) {
	userproctest.WithChild(b)
	ns, mac, tapFd := tapNS(b, "tvg0", GuestIP+"/24", userproc.Offloads)
	be, err := userproc.Start(userproc.Config{MAC: mac}, b.Logf)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	if err := be.SetVnetHdrSize(maxVnetHdr); err != nil {
		b.Fatal(err)
	}
	if err := be.SetOffload(userproc.Offloads); err != nil {
		b.Fatal(err)
	}
	pumpBoth(b, tapFd, be.Fd())
	ln, port := hostListener(b)
	go serveShortAnswers(ln)

	roundTrip := func() {
		c := dialFrom(b, ns, port)
		defer c.Close()
		if _, err := io.WriteString(c, "GET /rr HTTP/1.0\r\n\r\n"); err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, c); err != nil || n != int64(len(shortAnswer)) {
			b.Fatalf("answer: %d bytes, %v", n, err)
		}
	}
	roundTrip() // ARP and the first connection's set-up are not counted
	before := childThreads(b, be.Pid())
	n := 0
	for b.Loop() {
		roundTrip()
		n++
	}
	after := childThreads(b, be.Pid())
	b.ReportMetric(float64(after.Voluntary-before.Voluntary)/float64(n), "child-vol-switches/conn")
	b.ReportMetric(float64(after.Involuntary-before.Involuntary)/float64(n), "child-invol-switches/conn")
	b.ReportMetric(float64(after.RunNs-before.RunNs)/1e3/float64(n), "child-CPU-us/conn")
}

// shortAnswer is what the server sends each connection before it closes.
const shortAnswer = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"

// serveShortAnswers answers each connection's request with shortAnswer
// and closes it, as bench usernet's web server does for /rr; one
// connection at a time, as the benchmark makes them.
func serveShortAnswers(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		io.WriteString(c, shortAnswer)
		c.Close()
	}
}

// childThreads is the sum over the child's threads of their switches and
// CPU time (threads that ended before are not in it: the child's are its
// Go runtime's, which live as long as it).
func childThreads(tb testing.TB, pid int) schedstat.Thread {
	tb.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var sum schedstat.Thread
	for _, e := range ents {
		t, err := schedstat.ReadThread(dir + "/" + e.Name())
		if err != nil {
			continue // ended meanwhile
		}
		sum.Voluntary += t.Voluntary
		sum.Involuntary += t.Involuntary
		sum.RunNs += t.RunNs
	}
	return sum
}
