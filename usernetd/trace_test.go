package usernetd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tinyvmm/userproc"
)

// A TCP frame's summary is its ports and its flags and payload length;
// anything else, or a frame cut short, is none.
func TestTCPSummary(t *testing.T) {
	f := make([]byte, 14+20+20+5)
	binary.BigEndian.PutUint16(f[12:14], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], 20+20+5)
	ip[9] = 6
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:2], 8000)
	binary.BigEndian.PutUint16(tcp[2:4], 40000)
	tcp[12] = 5 << 4
	tcp[13] = 0x19 // FIN, PSH, ACK
	ports, fl, ok := tcpSummary(f)
	if !ok || ports != 8000<<16|40000 || fl != 0x19<<24|5 {
		t.Fatalf("%x %x %v", ports, fl, ok)
	}
	for _, bad := range [][]byte{f[:40], append([]byte{}, f...)} {
		if len(bad) == len(f) {
			bad[14+9] = 17 // UDP
		}
		if _, _, ok := tcpSummary(bad); ok {
			t.Errorf("a summary of % x", bad[:16])
		}
	}
	// A hostile header length runs past the frame: none.
	g := append([]byte{}, f...)
	g[14] = 0x4f
	if _, _, ok := tcpSummary(g); ok {
		t.Error("a summary past the frame's end")
	}
}

func TestWriteTrace(t *testing.T) {
	var b bytes.Buffer
	writeTrace(&b, []traceEv{{ns: 5, kind: trH2GRead, a: 40000, b: -1}, {ns: 6, kind: 200}})
	if got, want := b.String(), "5 h2g-read 40000 -1\n6 ? 0 0\n"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if !strings.Contains(traceNames[trSpliceDone], "splice") {
		t.Error("the names are out of step with the kinds")
	}
}

// The guest's frames are summarized as they come: none may panic it.
func FuzzTCPSummary(f *testing.F) {
	f.Add(make([]byte, 60))
	f.Add([]byte{12: 8, 13: 0, 14: 0x4f, 23: 6, 60: 0})
	f.Fuzz(func(t *testing.T, b []byte) { tcpSummary(b) })
}

// With the trace on, a connection through the NAT leaves its events
// under the guest's port: the dial, the request, the answer, the host's
// end of data, the half close and the guest's FIN frame.
func TestTraceOneConnection(t *testing.T) {
	tracer.mu.Lock()
	tracer.evs = make([]traceEv, 0, traceMax)
	tracer.on.Store(true)
	tracer.mu.Unlock()
	t.Cleanup(func() {
		tracer.mu.Lock()
		tracer.on.Store(false)
		tracer.evs = nil
		tracer.mu.Unlock()
	})
	ln, port := hostListener(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Read(make([]byte, 16))
		c.Write([]byte("ok"))
	}()
	b := open(t, Config{})
	g := newTestGuest(t, b, testMAC)
	c := g.dialGatewayWithin(t, port, 20*time.Second)
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(c); err != nil || string(got) != "ok" {
		t.Fatalf("%q, %v", got, err)
	}
	gport := c.LocalAddr().(*net.TCPAddr).Port
	want := map[string]bool{"nat-req": false, "nat-dialed": false, "g2h-read 3": false, "h2g-read 2": false,
		"h2g-read -1": false, "h2g-closed": false, "FIN to the guest": false}
	deadline := time.Now().Add(5 * time.Second)
	for {
		tracer.mu.Lock()
		for _, e := range tracer.evs {
			switch {
			case e.kind == trLinkTx && int(e.a&0xffff) == gport && e.b>>24&1 != 0:
				want["FIN to the guest"] = true
			case e.a == int64(gport) && (e.kind == trNATReq || e.kind == trNATDialed || e.kind == trH2GClosed):
				want[traceNames[e.kind]] = true
			case e.a == int64(gport) && (e.kind == trG2HRead || e.kind == trH2GRead):
				want[fmt.Sprintf("%s %d", traceNames[e.kind], e.b)] = true
			}
		}
		tracer.mu.Unlock()
		missing := ""
		for k, ok := range want {
			if !ok {
				missing += " " + k
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not in the trace:%s", missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StopTrace writes what the ticker has not: an event just before the
// process ends is in the file.
func TestStopTraceWritesTheTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	t.Setenv(userproc.TraceEnv, path)
	if err := StartTrace(); err != nil {
		t.Fatal(err)
	}
	trace(trNATReq, 40000, 0)
	StopTrace()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), " nat-req 40000 0\n") {
		t.Fatalf("the trace file has %q", b)
	}
}
