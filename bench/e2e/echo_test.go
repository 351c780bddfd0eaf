package e2e

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"testing"
	"time"
)

var peerMAC = net.HardwareAddr{0x0a, 0, 0, 0, 0, 1}

func arpRequest(target net.IP) []byte {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], peerMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0806)
	a := f[14:]
	binary.BigEndian.PutUint16(a[0:], 1)
	binary.BigEndian.PutUint16(a[2:], 0x0800)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 1)
	copy(a[8:14], peerMAC)
	copy(a[14:18], HostIP)
	copy(a[24:28], target.To4())
	return f
}

func TestEchoAnswersARP(t *testing.T) {
	r := echoReply(arpRequest(GuestIP), CeilingMAC, GuestIP)
	if r == nil {
		t.Fatal("no answer to an ARP request for our address")
	}
	a := r[14:]
	if !bytes.Equal(r[0:6], peerMAC) || binary.BigEndian.Uint16(a[6:]) != 2 ||
		!bytes.Equal(a[8:14], CeilingMAC) || !bytes.Equal(a[14:18], GuestIP) ||
		!bytes.Equal(a[18:24], peerMAC) || !bytes.Equal(a[24:28], HostIP) {
		t.Errorf("bad ARP reply % x", r)
	}
	if echoReply(arpRequest(net.IPv4(10, 0, 2, 99)), CeilingMAC, GuestIP) != nil {
		t.Error("answered an ARP request for another address")
	}
}

func icmpEcho(dst net.IP, payload int) []byte {
	total := 20 + 8 + payload
	f := make([]byte, 14+total)
	copy(f[0:6], CeilingMAC)
	copy(f[6:12], peerMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	h := f[14:]
	h[0], h[8], h[9] = 0x45, 64, 1
	binary.BigEndian.PutUint16(h[2:], uint16(total))
	copy(h[12:16], HostIP)
	copy(h[16:20], dst.To4())
	binary.BigEndian.PutUint16(h[10:], ipChecksum(h[:20]))
	icmp := h[20:total]
	icmp[0] = 8
	binary.BigEndian.PutUint16(icmp[4:], 0x1234)
	binary.BigEndian.PutUint16(icmp[6:], 7)
	for i := 8; i < len(icmp); i++ {
		icmp[i] = byte(i)
	}
	binary.BigEndian.PutUint16(icmp[2:], ipChecksum(icmp))
	return f
}

func TestEchoAnswersPing(t *testing.T) {
	req := icmpEcho(GuestIP, 56)
	r := echoReply(req, CeilingMAC, GuestIP)
	if r == nil {
		t.Fatal("no answer to a ping")
	}
	h := r[14:]
	total := int(binary.BigEndian.Uint16(h[2:]))
	if !bytes.Equal(r[0:6], peerMAC) || !bytes.Equal(h[12:16], GuestIP) || !bytes.Equal(h[16:20], HostIP) {
		t.Errorf("reply addressed wrongly: % x", r[:34])
	}
	if ipChecksum(h[:20]) != 0 || ipChecksum(h[20:total]) != 0 {
		t.Error("reply checksums do not verify")
	}
	if h[20] != 0 || !bytes.Equal(h[24:total], req[14+24:]) {
		t.Error("reply is not an echo reply with the request's id, seq and data")
	}
	if echoReply(icmpEcho(net.IPv4(10, 0, 2, 99), 8), CeilingMAC, GuestIP) != nil {
		t.Error("answered a ping for another address")
	}
	short := icmpEcho(GuestIP, 56)
	binary.BigEndian.PutUint16(short[16:], 200) // total length beyond the frame
	if echoReply(short, CeilingMAC, GuestIP) != nil {
		t.Error("answered a ping whose IP length exceeds the frame")
	}
}

// TestPingTimesEachReply pings the namespace's own address (answered by
// its kernel over loopback): every request gets its round trip, and a
// series to an address nobody answers times out request by request.
func TestPingTimesEachReply(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace and a raw socket")
	}
	ns, err := NewNamespace()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	res, err := Ping(ns, HostIP, 5, time.Millisecond, time.Second, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 5 || len(res.RTTs) != 5 {
		t.Fatalf("sent %d, answered %d; want 5 and 5", res.Sent, len(res.RTTs))
	}
	for _, rtt := range res.RTTs {
		if rtt <= 0 || rtt > time.Second {
			t.Errorf("round trip %v: want within (0, 1s]", rtt)
		}
	}
	start := time.Now()
	res, err = Ping(ns, net.IPv4(10, 0, 2, 99), 2, time.Millisecond, 50*time.Millisecond, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 2 || len(res.RTTs) != 0 || res.Stats().Lost != 2 {
		t.Errorf("to nobody: sent %d, answered %d; want 2 sent, none answered", res.Sent, len(res.RTTs))
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("two unanswered pings took %v; want about two 50 ms timeouts", took)
	}
}
