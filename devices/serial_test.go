package devices

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tinyvmm/internal/syncbuf"
)

type countingInterrupt struct{ n atomic.Int32 }

func (c *countingInterrupt) Trigger() error { c.n.Add(1); return nil }

func serialReg(s *Serial, off uint64) uint8 {
	b := []byte{0xee}
	s.Read(off, b)
	return b[0]
}

func serialSet(s *Serial, off uint64, v uint8) { s.Write(off, []byte{v}) }

func TestSerialOutputAndDivisorLatch(t *testing.T) {
	var out syncbuf.Buffer
	s := NewSerial(nil, &out)
	serialSet(s, uartLCR, lcrDLAB|0x03)
	serialSet(s, uartRBR, 0x01) // DLL, not output
	serialSet(s, uartIER, 0x00) // DLM
	if serialReg(s, uartRBR) != 0x01 || serialReg(s, uartIER) != 0 {
		t.Fatal("divisor latch does not read back")
	}
	serialSet(s, uartLCR, 0x03)
	for _, c := range []byte("ok\n") {
		serialSet(s, uartRBR, c)
	}
	if out.String() != "ok\n" {
		t.Fatalf("output %q, want %q", out.String(), "ok\n")
	}
	if lsr := serialReg(s, uartLSR); lsr&(lsrTHRE|lsrTEMT) != lsrTHRE|lsrTEMT || lsr&lsrDataReady != 0 {
		t.Fatalf("LSR %#x", lsr)
	}
	if serialReg(s, uartLCR) != 0x03 {
		t.Fatal("LCR does not read back")
	}
	serialSet(s, uartSCR, 0x5a)
	if serialReg(s, uartSCR) != 0x5a {
		t.Fatal("scratch register does not read back")
	}
}

// TestSerialLoopbackProbe replays the Linux 8250 driver's loopback check:
// MCR = LOOP|OUT2|RTS must read back as MSR = DCD|CTS (0x90).
func TestSerialLoopbackProbe(t *testing.T) {
	var out syncbuf.Buffer
	s := NewSerial(nil, &out)
	serialSet(s, uartMCR, mcrLoopback|0x0a)
	if got := serialReg(s, uartMSR) & 0xf0; got != 0x90 {
		t.Fatalf("loopback MSR %#x, want 0x90", got)
	}
	serialSet(s, uartRBR, 'x') // loops back to the receiver, not the console
	if out.String() != "" {
		t.Fatalf("loopback byte reached the console: %q", out.String())
	}
	if serialReg(s, uartLSR)&lsrDataReady == 0 || serialReg(s, uartRBR) != 'x' {
		t.Fatal("loopback byte not received")
	}
	serialSet(s, uartMCR, mcrOUT2)
	if got := serialReg(s, uartMSR); got != msrDCD|msrDSR|msrCTS {
		t.Fatalf("MSR %#x outside loopback", got)
	}
}

func TestSerialInputRaisesInterruptWhenEnabled(t *testing.T) {
	irq := &countingInterrupt{}
	s := NewSerial(irq, nil)
	s.Enqueue([]byte("a"))
	if irq.n.Load() != 0 {
		t.Fatal("interrupt with IER clear")
	}
	serialReg(s, uartRBR)
	serialSet(s, uartIER, ierRxData)
	s.Enqueue([]byte("hi"))
	if irq.n.Load() != 1 {
		t.Fatalf("%d interrupts for one arrival, want 1", irq.n.Load())
	}
	if iir := serialReg(s, uartIIR); iir != iirRxData {
		t.Fatalf("IIR %#x, want rx data", iir)
	}
	if serialReg(s, uartLSR)&lsrDataReady == 0 {
		t.Fatal("LSR data ready clear")
	}
	got := string([]byte{serialReg(s, uartRBR), serialReg(s, uartRBR)})
	if got != "hi" {
		t.Fatalf("received %q", got)
	}
	if serialReg(s, uartLSR)&lsrDataReady != 0 || serialReg(s, uartIIR) != iirNone {
		t.Fatal("data ready after draining")
	}
	if serialReg(s, uartRBR) != 0 {
		t.Fatal("empty RBR not 0")
	}
}

func TestSerialTHREInterrupt(t *testing.T) {
	irq := &countingInterrupt{}
	s := NewSerial(irq, &syncbuf.Buffer{})
	serialSet(s, uartIER, ierTHRE)
	if irq.n.Load() != 1 {
		t.Fatalf("enabling THRE interrupt raised %d", irq.n.Load())
	}
	if iir := serialReg(s, uartIIR); iir != iirTHRE {
		t.Fatalf("IIR %#x, want THRE", iir)
	}
	if iir := serialReg(s, uartIIR); iir != iirNone {
		t.Fatalf("IIR %#x after acknowledging THRE", iir)
	}
	serialSet(s, uartRBR, 'z')
	if irq.n.Load() != 2 || serialReg(s, uartIIR) != iirTHRE {
		t.Fatal("THR write did not raise THRE again")
	}
	serialSet(s, uartIIR, fcrEnable)
	if serialReg(s, uartIIR)&iirFIFOEnable != iirFIFOEnable {
		t.Fatal("FIFO enable bits missing from IIR")
	}
}

func TestSerialEnqueueWaitsForRoomAndClose(t *testing.T) {
	s := NewSerial(nil, nil)
	big := bytes.Repeat([]byte{'q'}, serialInputMax+10)
	done := make(chan bool)
	go func() { done <- s.Enqueue(big) }()
	select {
	case <-done:
		t.Fatal("Enqueue did not wait for room")
	case <-time.After(50 * time.Millisecond):
	}
	for i := 0; i < 10; i++ {
		serialReg(s, uartRBR)
	}
	if !<-done {
		t.Fatal("Enqueue failed after room was made")
	}
	go func() { done <- s.Enqueue([]byte("more")) }()
	time.Sleep(20 * time.Millisecond)
	s.Close()
	if <-done {
		t.Fatal("Enqueue succeeded after Close")
	}
}

func TestSerialFeedAndOverrun(t *testing.T) {
	s := NewSerial(nil, nil)
	if err := s.Feed(strings.NewReader("abc")); err == nil {
		t.Fatal("Feed returned nil at EOF")
	}
	if serialReg(s, uartRBR) != 'a' {
		t.Fatal("fed byte missing")
	}
	s.mu.Lock()
	s.pushRx(bytes.Repeat([]byte{1}, serialInputMax*2))
	n := len(s.rx)
	s.mu.Unlock()
	if n != serialInputMax || serialReg(s, uartLSR)&lsrOverrun == 0 {
		t.Fatalf("overrun: queue %d", n)
	}
	if serialReg(s, uartLSR)&lsrOverrun != 0 {
		t.Fatal("overrun not cleared by reading LSR")
	}
}

func TestSerialHostileAccessesDoNotPanic(t *testing.T) {
	s := NewSerial(&countingInterrupt{}, &syncbuf.Buffer{})
	for off := uint64(0); off < 16; off++ {
		for _, n := range []int{0, 1, 2, 4, 8} {
			b := make([]byte, n)
			s.Read(off, b)
			s.Write(off, b)
		}
	}
	s.Read(1<<40, make([]byte, 1))
}
