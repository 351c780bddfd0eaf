package usernetd

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
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
