package devices

import (
	"io"
	"sync"
)

// The COM1 UART a PC kernel looks for.
const (
	COM1Port = 0x3f8
	COM1IRQ  = 4
	// SerialPorts is the size of the UART's port range.
	SerialPorts = 8
)

// 8250/16550A register offsets (DLAB is LCR bit 7).
const (
	uartRBR = 0 // read, DLAB=0: receive buffer;  write: THR, transmit holding
	uartIER = 1 // DLAB=0: interrupt enable;     DLAB=1 (0 and 1): divisor latch
	uartIIR = 2 // read: interrupt identification; write: FCR, FIFO control
	uartLCR = 3
	uartMCR = 4
	uartLSR = 5
	uartMSR = 6
	uartSCR = 7

	ierRxData  = 1 << 0
	ierTHRE    = 1 << 1
	ierLineSts = 1 << 2
	ierModem   = 1 << 3

	iirNone       = 0x01
	iirTHRE       = 0x02
	iirRxData     = 0x04
	iirFIFOEnable = 0xc0

	fcrEnable  = 1 << 0
	fcrClearRx = 1 << 1

	lcrDLAB = 1 << 7

	mcrDTR      = 1 << 0
	mcrRTS      = 1 << 1
	mcrOUT1     = 1 << 2
	mcrOUT2     = 1 << 3
	mcrLoopback = 1 << 4

	lsrDataReady = 1 << 0
	lsrOverrun   = 1 << 1
	lsrTHRE      = 1 << 5
	lsrTEMT      = 1 << 6

	msrCTS = 1 << 4
	msrDSR = 1 << 5
	msrRI  = 1 << 6
	msrDCD = 1 << 7
)

// serialInputMax bounds the receive queue; the input goroutine waits for
// the guest to drain it rather than grow without limit.
const serialInputMax = 4096

// Serial is a 16550A UART: output goes to an io.Writer byte by byte as the
// guest writes THR, input comes from Feed or Enqueue and raises the
// receive interrupt when the guest enabled it.
type Serial struct {
	irq Interrupt
	out io.Writer

	mu        sync.Mutex
	spaceCond *sync.Cond // signalled when the guest drains input
	closed    bool
	rx        []byte
	ier       uint8
	lcr       uint8
	mcr       uint8
	lsrExtra  uint8 // overrun, cleared by reading LSR
	scr       uint8
	dll, dlm  uint8
	fifo      bool
	threPend  bool // a THR-empty interrupt is pending until IIR is read or THR written
}

// NewSerial makes a UART that writes the guest's output to out and raises
// irq (IRQ 4 for COM1; may be nil).
func NewSerial(irq Interrupt, out io.Writer) *Serial {
	s := &Serial{irq: irq, out: out, mcr: mcrOUT2, dll: 0x0c} // 9600 baud, like a BIOS leaves it
	s.spaceCond = sync.NewCond(&s.mu)
	return s
}

// Read implements BusDevice.
func (s *Serial) Read(offset uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	for i := range data {
		data[i] = 0
	}
	s.mu.Lock()
	v, raise := s.readReg(offset)
	s.mu.Unlock()
	data[0] = v
	s.raise(raise)
}

// Write implements BusDevice.
func (s *Serial) Write(offset uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	s.mu.Lock()
	out, raise := s.writeReg(offset, data[0])
	s.mu.Unlock()
	if out >= 0 && s.out != nil {
		s.out.Write([]byte{byte(out)}) // a console that fails must not stop the guest
	}
	s.raise(raise)
}

func (s *Serial) raise(yes bool) {
	if yes && s.irq != nil {
		s.irq.Trigger()
	}
}

func (s *Serial) dlab() bool { return s.lcr&lcrDLAB != 0 }

// readReg returns the register's value and whether an interrupt condition
// appeared (never on a read, but kept symmetrical).
func (s *Serial) readReg(offset uint64) (uint8, bool) {
	switch offset {
	case uartRBR:
		if s.dlab() {
			return s.dll, false
		}
		if len(s.rx) == 0 {
			return 0, false
		}
		b := s.rx[0]
		s.rx = s.rx[1:]
		if len(s.rx) == 0 {
			s.rx = nil // let the backing array go
		}
		s.spaceCond.Broadcast()
		return b, false
	case uartIER:
		if s.dlab() {
			return s.dlm, false
		}
		return s.ier, false
	case uartIIR:
		v := s.iir()
		if v&0x0f == iirTHRE {
			s.threPend = false // reading IIR acknowledges THR empty
		}
		if s.fifo {
			v |= iirFIFOEnable
		}
		return v, false
	case uartLCR:
		return s.lcr, false
	case uartMCR:
		return s.mcr, false
	case uartLSR:
		v := uint8(lsrTHRE|lsrTEMT) | s.lsrExtra
		if len(s.rx) > 0 {
			v |= lsrDataReady
		}
		s.lsrExtra = 0
		return v, false
	case uartMSR:
		return s.msr(), false
	case uartSCR:
		return s.scr, false
	}
	return 0, false
}

// writeReg stores a register; out is the byte to transmit, or -1.
func (s *Serial) writeReg(offset uint64, v uint8) (out int, raise bool) {
	out = -1
	switch offset {
	case uartRBR:
		if s.dlab() {
			s.dll = v
			return
		}
		if s.mcr&mcrLoopback != 0 {
			raise = s.pushRx([]byte{v})
		} else {
			out = int(v)
		}
		// Transmission is instant: THR is empty again at once.
		s.threPend = true
		raise = raise || s.ier&ierTHRE != 0
	case uartIER:
		if s.dlab() {
			s.dlm = v
			return
		}
		was := s.iir()
		s.ier = v & 0x0f
		if v&ierTHRE != 0 {
			s.threPend = true
		}
		raise = was == iirNone && s.iir() != iirNone
	case uartIIR: // FCR
		s.fifo = v&fcrEnable != 0
		if v&fcrClearRx != 0 {
			s.rx = nil
			s.spaceCond.Broadcast()
		}
	case uartLCR:
		s.lcr = v
	case uartMCR:
		s.mcr = v & 0x1f
	case uartSCR:
		s.scr = v
	}
	return
}

// iir is the highest-priority pending interrupt (receive before THR empty).
func (s *Serial) iir() uint8 {
	switch {
	case s.ier&ierRxData != 0 && len(s.rx) > 0:
		return iirRxData
	case s.ier&ierTHRE != 0 && s.threPend:
		return iirTHRE
	}
	return iirNone
}

// msr reports the modem lines: in loopback they follow MCR (the 8250
// driver's probe checks this), otherwise the line is up.
func (s *Serial) msr() uint8 {
	if s.mcr&mcrLoopback == 0 {
		return msrDCD | msrDSR | msrCTS
	}
	var v uint8
	if s.mcr&mcrDTR != 0 {
		v |= msrDSR
	}
	if s.mcr&mcrRTS != 0 {
		v |= msrCTS
	}
	if s.mcr&mcrOUT1 != 0 {
		v |= msrRI
	}
	if s.mcr&mcrOUT2 != 0 {
		v |= msrDCD
	}
	return v
}

// pushRx queues received bytes; it reports whether the receive interrupt
// should be raised. Bytes past serialInputMax set overrun and are dropped.
func (s *Serial) pushRx(b []byte) bool {
	wasEmpty := len(s.rx) == 0
	room := serialInputMax - len(s.rx)
	if len(b) > room {
		b = b[:room]
		s.lsrExtra |= lsrOverrun
	}
	s.rx = append(s.rx, b...)
	return wasEmpty && len(s.rx) > 0 && s.ier&ierRxData != 0
}

// Enqueue delivers input bytes to the guest, waiting while the receive
// queue is full. It returns false once the UART is closed.
func (s *Serial) Enqueue(b []byte) bool {
	for len(b) > 0 {
		s.mu.Lock()
		for !s.closed && len(s.rx) >= serialInputMax {
			s.spaceCond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return false
		}
		n := min(len(b), serialInputMax-len(s.rx))
		raise := s.pushRx(b[:n])
		s.mu.Unlock()
		s.raise(raise)
		b = b[n:]
	}
	return true
}

// Feed copies r (the host terminal) into the guest until r fails or the
// UART is closed. Run it in its own goroutine.
func (s *Serial) Feed(r io.Reader) error {
	buf := make([]byte, 256)
	for {
		n, err := r.Read(buf)
		if n > 0 && !s.Enqueue(buf[:n]) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Close wakes an Enqueue blocked on a full queue; later input is dropped.
func (s *Serial) Close() {
	s.mu.Lock()
	s.closed = true
	s.spaceCond.Broadcast()
	s.mu.Unlock()
}
