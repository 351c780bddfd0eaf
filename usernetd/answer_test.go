package usernetd

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// linkFrame is what a test needs of one TCP frame to the guest.
type linkFrame struct {
	flags   header.TCPFlags
	payload string
}

// tcpFrameOf parses a queued frame (vnet header of hdrLen bytes,
// Ethernet, IPv4, TCP); ok is false for anything else.
func tcpFrameOf(buf []byte, hdrLen int) (f linkFrame, ok bool) {
	if len(buf) < hdrLen+header.EthernetMinimumSize+header.IPv4MinimumSize {
		return f, false
	}
	eth := header.Ethernet(buf[hdrLen:])
	if eth.Type() != header.IPv4ProtocolNumber {
		return f, false
	}
	ip := header.IPv4(buf[hdrLen+header.EthernetMinimumSize:])
	if ip.Protocol() != uint8(header.TCPProtocolNumber) || int(ip.TotalLength()) > len(ip) {
		return f, false
	}
	tcp := header.TCP(ip[ip.HeaderLength():ip.TotalLength()])
	if len(tcp) < header.TCPMinimumSize || int(tcp.DataOffset()) > len(tcp) {
		return f, false
	}
	return linkFrame{flags: tcp.Flags(), payload: string(tcp[tcp.DataOffset():])}, true
}

// A host that answers and closes at once (the answer and its end of data
// reach the host socket together) has both reach the device in one send,
// the answer first: one turn of the link, one interrupt of the guest,
// where the FIN used to take a turn of its own behind the answer. With
// one P, as in the nested L1 (the ACK of the request then waits in the
// link too).
func TestNATSendsTheFINWithTheAnswer(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ln, port := hostListener(t)
	const answer = "HTTP/1.0 200 OK\r\n\r\nok\n"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			req := make([]byte, 4)
			if _, err := io.ReadFull(c, req); err == nil {
				// Corked, the answer leaves with the FIN, in one
				// segment: both are on the NAT's socket at once.
				if rc, err := c.(*net.TCPConn).SyscallConn(); err == nil {
					rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) })
				}
				io.WriteString(c, answer)
			}
			c.Close()
		}
	}()
	b := open(t, Config{})
	var mu sync.Mutex
	var batches [][]linkFrame
	tx := b.conn.tx
	tx.mu.Lock()
	tx.onBatch = func(batch [][]byte) {
		var fs []linkFrame
		for _, buf := range batch {
			if f, ok := tcpFrameOf(buf, int(b.hdrLen.Load())); ok {
				fs = append(fs, f)
			}
		}
		mu.Lock()
		batches = append(batches, fs)
		mu.Unlock()
	}
	tx.mu.Unlock()
	g := newTestGuest(t, b, testMAC)
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c := g.dialGateway(ctx, t, port)
		cancel()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, "GET\n"); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != answer {
			t.Fatalf("connection %d: the guest read %q, %v; want %q", i, got, err, answer)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	answers := 0
	for _, fs := range batches {
		for j, f := range fs {
			if f.payload != answer {
				continue
			}
			answers++
			withFIN := false
			for _, after := range fs[j:] {
				withFIN = withFIN || after.flags.Contains(header.TCPFlagFin)
			}
			if !withFIN {
				t.Errorf("the answer went to the device in a send of %d frames with no FIN at or after it: %+v", len(fs), fs)
			}
		}
	}
	if answers != 5 {
		t.Errorf("%d answers seen in the link's sends, want 5", answers)
	}
}

// frameFor is a test frame for the batcher: size bytes of tag.
func frameFor(tag byte, size int) []byte { return bytes.Repeat([]byte{tag}, size) }

// A pure ACK waits for the batcher's goroutine, which runs after the
// writer and what the writer woke (with one P); a later frame of the
// same connection that acknowledges as much takes its place, and the ACK
// is never sent. Another connection's ACK is sent, as is one further on
// than the frame after it; a lone ACK is sent once the writer lets the
// goroutine run.
func TestTxBatcherLeavesOutSupersededACKs(t *testing.T) {
	if !lateACKs {
		t.Skip(OffEnv + " turns the late ACKs off")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	uc, err := unixConn(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	rc, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	tx := newTxBatcher(rc)
	defer tx.stop()
	buf := make([]byte, 2048)
	recv := func() int {
		n, _, err := unix.Recvfrom(fds[0], buf, unix.MSG_DONTWAIT)
		if err != nil {
			return -1
		}
		return int(buf[12])<<16 | n // the tag behind the vnet header
	}
	hdr := make([]byte, 12)
	conn := tcpAck{conn: [12]byte{10, 0, 2, 2, 10, 0, 2, 15, 0, 80, 0xc0, 0x01}}
	other := conn
	other.conn[11]++
	ack := func(c tcpAck, num uint32, pure bool) *tcpAck { c.num, c.pure = num, pure; return &c }

	tx.writeAck(hdr, ack(conn, 100, true), frameFor('a', 54))
	tx.writeAck(hdr, ack(other, 7, true), frameFor('o', 54))
	if n := recv(); n != -1 {
		t.Fatalf("a pure ACK went at once (%#x)", n)
	}
	tx.writeAck(hdr, ack(conn, 100, false), frameFor('d', 100)) // the answer
	if n := recv(); n != 'o'<<16|66 {
		t.Fatalf("first frame after the answer's write: %#x, want the other connection's ACK", n)
	}
	if n := recv(); n != 'd'<<16|112 {
		t.Fatalf("second frame: %#x, want the answer", n)
	}
	if n := recv(); n != -1 {
		t.Fatalf("a frame after the answer: %#x; the ACK it stands for was sent", n)
	}
	if tx.superseded.Load() != 1 {
		t.Errorf("%d ACKs left out, want 1", tx.superseded.Load())
	}

	// An ACK further on than the next frame stays.
	tx.writeAck(hdr, ack(conn, 300, true), frameFor('b', 54))
	tx.writeAck(hdr, ack(conn, 200, false), frameFor('e', 100))
	if n := recv(); n != 'b'<<16|66 {
		t.Fatalf("an ACK further on than the frame after it: %#x, want it sent", n)
	}
	if n := recv(); n != 'e'<<16|112 {
		t.Fatalf("the frame after it: %#x", n)
	}
	tx.writeAck(hdr, ack(conn, 300, true), frameFor('c', 54))
	deadline := time.Now().Add(10 * time.Second)
	n := recv()
	for n == -1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // lets the batcher's goroutine run
		n = recv()
	}
	if n != 'c'<<16|66 {
		t.Fatalf("a lone pure ACK: %#x, want it sent once the writer yields", n)
	}
}

// tcpPacket is a TCP segment from the gateway to the guest as the stack
// hands it to the link.
func tcpPacket(flags header.TCPFlags, ack uint32, opts, payload []byte) *stack.PacketBuffer {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{ReserveHeaderBytes: 128, Payload: buffer.MakeWithData(payload)})
	tcpLen := header.TCPMinimumSize + len(opts)
	th := header.TCP(pkt.TransportHeader().Push(tcpLen))
	th.Encode(&header.TCPFields{SrcPort: 80, DstPort: 40000, SeqNum: 1, AckNum: ack, DataOffset: uint8(tcpLen), Flags: flags, WindowSize: 1000})
	copy(th[header.TCPMinimumSize:], opts)
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	ip := header.IPv4(pkt.NetworkHeader().Push(header.IPv4MinimumSize))
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(header.IPv4MinimumSize + tcpLen + len(payload)), Protocol: uint8(header.TCPProtocolNumber), TTL: 64,
		SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 2, 2}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 2, 15}),
	})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	return pkt
}

// Only an ACK with no data, no other flag and no SACK blocks may wait or
// be left out for a later frame; every frame with an ACK but a reset
// stands for the waiting ones of its connection.
func TestAckOf(t *testing.T) {
	ts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	sack := []byte{1, 1, 5, 10, 0, 0, 0, 9, 0, 0, 0, 12}
	for _, c := range []struct {
		name          string
		flags         header.TCPFlags
		opts, payload []byte
		ack, pure     bool
	}{
		{"pure ACK", header.TCPFlagAck, nil, nil, true, true},
		{"ACK with timestamps", header.TCPFlagAck, ts, nil, true, true},
		{"ACK with SACK blocks", header.TCPFlagAck, sack, nil, true, false},
		{"data", header.TCPFlagAck | header.TCPFlagPsh, ts, []byte("ok\n"), true, false},
		{"FIN", header.TCPFlagAck | header.TCPFlagFin, ts, nil, true, false},
		{"SYN-ACK", header.TCPFlagAck | header.TCPFlagSyn, nil, nil, true, false},
		{"reset", header.TCPFlagAck | header.TCPFlagRst, nil, nil, false, false},
		{"SYN", header.TCPFlagSyn, nil, nil, false, false},
	} {
		pkt := tcpPacket(c.flags, 1234, c.opts, c.payload)
		a, ok := ackOf(pkt)
		pkt.DecRef()
		if ok != c.ack || a.pure != c.pure || ok && a.num != 1234 {
			t.Errorf("%s: ack %v (number %d), pure %v; want ack %v, pure %v", c.name, ok, a.num, a.pure, c.ack, c.pure)
		}
		if ok && a.conn != [12]byte{10, 0, 2, 2, 10, 0, 2, 15, 0, 80, 0x9c, 0x40} {
			t.Errorf("%s: connection %v", c.name, a.conn)
		}
	}
}
