package usernetd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"tinyvmm/userproc"
)

// The trace (userproc.TraceEnv) is a timeline of the NAT's and the
// link's events, one line each: "NS EVENT A B". Off, each event costs a
// load and a branch.

// traceKind is what happened; a and b say more (traceNames).
type traceKind uint8

const (
	trNATReq      traceKind = iota + 1 // a guest port: the guest's SYN reached the forwarder
	trNATDialed                        // a guest port, b the host socket's local port: connected
	trNATEndpoint                      // a guest port: the guest's endpoint made (SYN-ACK)
	trH2GRead                          // a guest port, b bytes read from the host (-1 its end)
	trH2GWrote                         // a guest port, b bytes written into the stack
	trH2GClosed                        // a guest port: the stack's half close (FIN) done
	trG2HRead                          // a guest port, b bytes read from the stack (-1 its end)
	trG2HWrote                         // a guest port, b bytes written to the host
	trG2HClosed                        // a guest port: the host socket's half close done
	trHostSys                          // a host local port, b the raw read's result (-errno)
	trLinkTx                           // a ports (src<<16|dst), b flags<<24|payload: a frame queued to the guest
	trLinkSent                         // a frames one sendmmsg sent
	trLinkRx                           // as trLinkTx: a frame from the guest
	trSpliceDone                       // a guest port
)

var traceNames = [...]string{"", "nat-req", "nat-dialed", "nat-endpoint", "h2g-read", "h2g-wrote", "h2g-closed",
	"g2h-read", "g2h-wrote", "g2h-closed", "host-sys", "link-tx", "link-sent", "link-rx", "splice-done"}

type traceEv struct {
	ns   int64
	kind traceKind
	a, b int64
}

var tracer struct {
	on  atomic.Bool
	mu  sync.Mutex
	evs []traceEv
	w   *bufio.Writer
	f   *os.File
	// stop ends the writer goroutine, which closes done as it returns.
	stop, done chan struct{}
}

// traceMax bounds the events held between two writes of the file.
const traceMax = 1 << 16

// StartTrace opens userproc.TraceEnv's file, if it is set, and writes the events
// to it every traceEvery; call it before the privileges go (the file is
// opened as the process starts).
func StartTrace() error {
	path := os.Getenv(userproc.TraceEnv)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("trace: %v", err)
	}
	tracer.f, tracer.w = f, bufio.NewWriter(f)
	tracer.evs = make([]traceEv, 0, traceMax)
	tracer.on.Store(true)
	tracer.stop, tracer.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(tracer.done)
		tick := time.NewTicker(traceEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				flushTrace()
			case <-tracer.stop:
				return
			}
		}
	}()
	return nil
}

// traceEvery is how often the events go to the file.
const traceEvery = 500 * time.Millisecond

func flushTrace() {
	tracer.mu.Lock()
	evs := tracer.evs
	tracer.evs = make([]traceEv, 0, traceMax)
	tracer.mu.Unlock()
	writeTrace(tracer.w, evs)
	tracer.w.Flush()
}

// StopTrace writes the events the ticker has not written yet and closes
// the file: without it, a process that exits loses up to traceEvery of
// the timeline's end.
func StopTrace() {
	if tracer.f == nil {
		return
	}
	tracer.on.Store(false)
	close(tracer.stop)
	<-tracer.done
	flushTrace()
	tracer.f.Close()
	tracer.f = nil
}

func writeTrace(w io.Writer, evs []traceEv) {
	for _, e := range evs {
		name := "?"
		if int(e.kind) < len(traceNames) {
			name = traceNames[e.kind]
		}
		fmt.Fprintf(w, "%d %s %d %d\n", e.ns, name, e.a, e.b)
	}
}

// trace notes one event.
func trace(k traceKind, a, b int) {
	if !tracer.on.Load() {
		return
	}
	now := time.Now().UnixNano()
	tracer.mu.Lock()
	if len(tracer.evs) < cap(tracer.evs) {
		tracer.evs = append(tracer.evs, traceEv{now, k, int64(a), int64(b)})
	}
	tracer.mu.Unlock()
}

// traceFrame notes a frame to or from the guest if it is TCP over IPv4.
func traceFrame(k traceKind, f []byte) {
	if !tracer.on.Load() {
		return
	}
	if ports, fl, ok := tcpSummary(f); ok {
		trace(k, ports, fl)
	}
}

// tcpSummary is an Ethernet frame's TCP ports (src<<16|dst) and its
// flags<<24|payload length, if it carries TCP over IPv4.
func tcpSummary(f []byte) (ports, flagsLen int, ok bool) {
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
		return 0, 0, false
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != 6 || ihl < 20 || len(ip) < ihl+20 {
		return 0, 0, false
	}
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	tcp := ip[ihl:]
	doff := int(tcp[12]>>4) * 4
	payload := max(total-ihl-doff, 0)
	ports = int(binary.BigEndian.Uint16(tcp[0:2]))<<16 | int(binary.BigEndian.Uint16(tcp[2:4]))
	return ports, int(tcp[13])<<24 | payload, true
}
