package vmm

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
	"tinyvmm/userproc"
)

// TestLinuxGuestUserNet is --net user as a CI user runs it: tinyvmm as a
// non-root user, no tap. In one boot the guest gets its address by DHCP,
// resolves the gateway's name through its DNS server, fetches a page from
// an HTTP server this test runs on 127.0.0.1, through the gateway's
// address; then it serves one HTTP reply with busybox nc, which this test
// fetches through a hostfwd on 127.0.0.1. Everything happens inside a
// network namespace the test creates, whose loopback is the only network:
// nothing can leave through the NAT.
func TestLinuxGuestUserNet(t *testing.T) {
	bin := tinyvmmCLI(t)
	ns := netnstest.Setup(t)
	var ln net.Listener
	var fwdPort int
	if err := ns.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		// A free port for the hostfwd (nothing else runs in the namespace).
		l2, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		fwdPort = l2.Addr().(*net.TCPAddr).Port
		return l2.Close()
	}); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "page %s from the host's loopback, to %s\n", r.URL.Path, r.RemoteAddr)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	const guestPort = 8080
	script := strings.Join([]string{
		"ip -4 -o addr show dev eth0",
		"cat /etc/resolv.conf",
		"nslookup -type=a " + userproc.HostName,
		fmt.Sprintf("wget -q -O - http://%s:%d/from-guest", userproc.GatewayIP, port),
		fmt.Sprintf("printf 'HTTP/1.0 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nserved by the guest\\n' | nc -l -p %d", guestPort),
	}, " && ")
	dir := userDir(t)
	wait := startCLI(t, ns, bin, dir, "run", "--timeout", "4m",
		"--net", fmt.Sprintf("user,hostfwd=tcp:127.0.0.1:%d-:%d", fwdPort, guestPort), "--", "sh", "-c", script)

	// The forward answers (with a closed connection) before the guest
	// listens; retry until the guest's reply comes, bounded.
	var reply string
	var lastErr error
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		reply, lastErr = fetchIn(ns, fmt.Sprintf("127.0.0.1:%d", fwdPort))
		if strings.Contains(reply, "served by the guest") {
			break
		}
	}
	status, out, stderr, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if status != 0 {
		t.Fatalf("status %d; console:\n%s\nstderr:\n%s", status, tail(out, 40), stderr)
	}
	for _, want := range []string{
		userproc.GuestIP + "/24",                    // DHCP's lease
		"nameserver " + userproc.GatewayIP,          // and its DNS server
		"Address: " + userproc.GatewayIP,            // nslookup's answer
		"page /from-guest from the host's loopback", // the fetch through the gateway
		"to 127.0.0.1:",                             // arriving from the host's own loopback (NAT)
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, tail(out, 40))
		}
	}
	if hits.Load() != 1 {
		t.Errorf("the host's server had %d requests, want 1", hits.Load())
	}
	if !strings.HasPrefix(reply, "HTTP/1.0 200 OK") || !strings.HasSuffix(reply, "\r\n\r\nserved by the guest\n") {
		t.Errorf("through the hostfwd: %q (last error %v)", reply, lastErr)
	}
	if !strings.Contains(out, "GET / HTTP/1.0") {
		t.Errorf("the guest's nc did not print the host's request:\n%s", tail(out, 40))
	}
}

// fetchIn sends one HTTP/1.0 GET to addr from inside ns (net/http would
// dial on a thread outside it) and returns the whole reply.
func fetchIn(ns *scratchns.NS, addr string) (string, error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, 5*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	c.(*net.TCPConn).CloseWrite() // nc exits once both directions end
	b, err := io.ReadAll(c)
	return string(b), err
}
