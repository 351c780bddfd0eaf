package nested

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/syncbuf"
)

// lapicDump is `info lapic` as QEMU 7.2 prints it (the lines that matter).
func lapicDump(irr string, ppr int) string {
	return lapicDumpTimer(irr, ppr, 62500, 0)
}

// lapicDumpTimer adds the APIC timer's counts.
func lapicDumpTimer(irr string, ppr int, initial, current uint64) string {
	return "dumping local APIC state for CPU 0 \r\n\r\n" +
		"LVTT\t 0x000200ec active-hi edge                 one-shot     Fixed  (vec 236)\r\n" +
		fmt.Sprintf("Timer\t DCR=0x3 (divide by 16) initial_count = %d current_count = %d\r\n", initial, current) +
		"SPIV\t 0x000001ff APIC enabled, focus=off, spurious vec 255\r\n" +
		"ISR\t (none)\r\nIRR\t " + irr + "\r\n\r\n" +
		fmt.Sprintf("APR 0x00 TPR 0x10 DFR 0x0f LDR 0x01 PPR 0x%02x\r\n", ppr)
}

func TestParseLapic(t *testing.T) {
	for _, tc := range []struct {
		irr   string
		ppr   int
		deliv int
	}{
		{"236 ", 0x10, 236},  // the freeze: the timer above the priority
		{"(none)", 0x10, -1}, // nothing pending
		{"236 ", 0xe0, -1},   // in the timer's class: waits for the EOI
		{"34(level) 236 ", 0x20, 236},
		{"34(level) ", 0x20, -1}, // below the priority
		{"33 48 ", 0x20, 48},
	} {
		st, ok := parseLapic(strings.ReplaceAll(lapicDump(tc.irr, tc.ppr), "\r", ""))
		if !ok || st.PPR != tc.ppr || !st.Enabled {
			t.Errorf("IRR %q PPR %#x: parsed %+v ok=%v", tc.irr, tc.ppr, st, ok)
		}
		if got := st.Deliverable(); got != tc.deliv {
			t.Errorf("IRR %q PPR %#x: deliverable %d, want %d", tc.irr, tc.ppr, got, tc.deliv)
		}
	}
	if _, ok := parseLapic("No CPU available\n"); ok {
		t.Error("an answer without an APIC dump parsed")
	}
	disabled := strings.Replace(lapicDump("236 ", 0), "APIC enabled", "APIC disabled", 1)
	if st, _ := parseLapic(disabled); st.Deliverable() != -1 {
		t.Error("a disabled APIC delivers nothing")
	}
}

func TestLostInterruptWatchNeedsReadsInARow(t *testing.T) {
	l := lostInterruptWatch{need: 3}
	pending := lapicState{Enabled: true, IRR: []int{236}, PPR: 0x10}
	idle := lapicState{Enabled: true, PPR: 0x10}
	seq := []struct {
		st   lapicState
		wake bool
	}{
		{pending, false}, {pending, false}, {idle, false}, // taken: the count starts over
		{pending, false}, {pending, false}, {pending, true}, // three in a row
		{pending, false}, {pending, false}, {pending, true}, // still lost: woken again
	}
	for i, s := range seq {
		if _, wake := l.sample(0, s.st); wake != s.wake {
			t.Fatalf("read %d: wake %v, want %v", i, wake, s.wake)
		}
	}
	// Each CPU counts for itself.
	l = lostInterruptWatch{need: 2}
	l.sample(0, pending)
	if _, wake := l.sample(1, pending); wake {
		t.Error("CPU 1's first read woke it")
	}
	if _, wake := l.sample(0, pending); !wake {
		t.Error("CPU 0's second read did not wake it")
	}
}

// fakeMonitor answers like QEMU's human monitor: `info lapic 0` shows the
// timer vector pending above the priority until a byte arrives on the
// serial port, as in a lost interrupt.
type fakeMonitor struct {
	woken atomic.Bool
	ppr   int
	asked atomic.Int32
	regs  string // `info registers 0`'s line; halted with IF set when empty
	// period, when set, makes the vector a periodic one that L1 takes:
	// every period-th read of the APIC finds it gone.
	period int32
}

func (f *fakeMonitor) serve(t *testing.T, sock string) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprint(c, "QEMU 7.2.22 monitor - type 'help' for more information\r\n(qemu) ")
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					cmd := sc.Text()
					ans := ""
					switch {
					case cmd == "info lapic 0":
						n := f.asked.Add(1)
						irr := "236 "
						if f.woken.Load() || (f.period > 0 && n%f.period == 0) {
							irr = "(none)"
						}
						ans = lapicDump(irr, f.ppr)
					case cmd == "info registers 0":
						regs := f.regs
						if regs == "" {
							regs = "RIP=ffffffff812b70c3 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1"
						}
						ans = "CPU#0\r\n" + regs + "\r\n"
					}
					// The line editor echoes the command with escapes.
					fmt.Fprintf(c, "%s\x1b[K\r\n%s(qemu) ", cmd, ans)
				}
			}()
		}
	}()
}

type serialPort struct {
	mu  sync.Mutex
	got strings.Builder
	f   *fakeMonitor
}

func (s *serialPort) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got.Write(p)
	s.f.woken.Store(true)
	return len(p), nil
}

// watchFake runs watchL1 on one CPU (this process's threads as QEMU's)
// against the fake monitor f, with serial as L1's serial port and out as
// the console, a 20 ms watch and a console that is never silent for long,
// until f has answered asks queries; then the console ends and the watch
// returns what it did.
func watchFake(t *testing.T, f *fakeMonitor, serial *serialPort, out *syncbuf.Buffer, asks int32) watchResult {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "mon.sock")
	f.serve(t, sock)
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	scanned := make(chan struct{})
	result := make(chan watchResult)
	m := Machine{Watch: 20 * time.Millisecond, Stall: time.Minute}
	go func() {
		result <- watchL1(m, 1, os.Getpid(), out, &last, serial, sock, scanned, func() { t.Error("killed") })
	}()
	for f.asked.Load() < asks {
		time.Sleep(10 * time.Millisecond)
	}
	close(scanned)
	return <-result
}

// watchL1 wakes a CPU that holds a deliverable vector read after read,
// with a byte on the serial port, once; and leaves alone a CPU whose
// pending vector the priority holds back.
func TestWatchWakesACPUThatLostAnInterrupt(t *testing.T) {
	for _, tc := range []struct {
		ppr   int
		wakes int
	}{{0x10, 1}, {0xe0, 0}} {
		f := &fakeMonitor{ppr: tc.ppr}
		serial := &serialPort{f: f}
		var out syncbuf.Buffer
		w := watchFake(t, f, serial, &out, 10)
		serial.mu.Lock()
		got := serial.got.String()
		serial.mu.Unlock()
		if len(w.wakes) != tc.wakes || len(got) != tc.wakes {
			t.Errorf("PPR %#x: %d wakes (%q), %q on the serial port; want %d\n%s", tc.ppr, len(w.wakes), w.wakes, got, tc.wakes, out.String())
		}
		if tc.wakes > 0 && (!strings.Contains(w.wakes[0], "CPU#0 vector 236") || !strings.Contains(w.wakes[0], "RIP=ffffffff812b70c3 RFL=00000246 HLT=1") ||
			!strings.Contains(out.String(), "L1 WAKE 1: lost an interrupt")) {
			t.Errorf("the wake is not described: %q\n%s", w.wakes, out.String())
		}
	}
}

// A vector that three reads find pending but that L1 takes in the reads
// that follow (a periodic one, raised again before each slow read) is not
// lost: the watch counts it and writes nothing to the serial port.
func TestWatchLeavesAloneAVectorL1Takes(t *testing.T) {
	f := &fakeMonitor{ppr: 0x10, period: 5}
	serial := &serialPort{f: f}
	var out syncbuf.Buffer
	w := watchFake(t, f, serial, &out, 40)
	if len(w.wakes) != 0 || f.woken.Load() {
		t.Errorf("woken %d times\n%s", len(w.wakes), out.String())
	}
	if w.taken == 0 || !strings.Contains(out.String(), "vector 236 pending in 3 reads, not woken: L1 took it") {
		t.Errorf("taken %d, want some\n%s", w.taken, out.String())
	}
}

// parseLapic reads what a real QEMU prints.
func TestParseLapicFromQEMU(t *testing.T) {
	if _, err := exec.LookPath(QEMUBinary); err != nil {
		t.Skip(QEMUBinary + " not installed")
	}
	sock := filepath.Join(t.TempDir(), "mon.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, QEMUBinary, "-M", "pc", "-S", "-nodefaults", "-display", "none",
		"-monitor", "unix:"+sock+",server=on,wait=off")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var h *hmp
	var err error
	for i := 0; i < 100; i++ { // QEMU still starting
		if h, err = dialHMP(sock, 2*time.Second); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ans, err := h.do("info lapic 0", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := parseLapic(ans)
	if !ok || st.Deliverable() != -1 || strings.Contains(ans, "\x1b") || strings.Contains(ans, "info lapic") {
		t.Errorf("info lapic 0: %+v ok=%v from %q", st, ok, ans)
	}
}

// Every run closes with the count CI looks for, and each wake under it.
func TestWakeSummaryCountsEveryWake(t *testing.T) {
	if got := (Result{}).WakeSummary(); !strings.HasPrefix(got, "L1 wakes: 0 (") {
		t.Errorf("no wakes: %q", got)
	}
	r := Result{Wakes: 2, WakeLog: []string{"CPU#0 vector 236 a", "CPU#0 vector 48 b"}, Masked: 5, Starved: 1, Taken: 3}
	want := "L1 wakes: 2 (not losses, not woken: 5 reads with interrupts off, 0 with L1's timer programmed again, 1 times the vCPU thread was off the host CPU, 3 vectors L1 took within 200ms of the reads)\n  wake 1: CPU#0 vector 236 a\n  wake 2: CPU#0 vector 48 b"
	if got := r.WakeSummary(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The scheduler's account of a thread: this test's own thread has run.
func TestReadThreadSched(t *testing.T) {
	ts, ok := readThreadSched(os.Getpid(), os.Getpid())
	if !ok || ts.Run <= 0 || ts.State == "" {
		t.Fatalf("schedstat of this process: %+v ok=%v", ts, ok)
	}
	if _, ok := readThreadSched(os.Getpid(), -1); ok {
		t.Error("a thread that does not exist was read")
	}
	from := threadSched{Run: time.Second, Wait: 0}
	to := threadSched{Run: 1800 * time.Millisecond, Wait: 300 * time.Millisecond, State: "R"}
	if got, want := schedDelta(from, to, 1200*time.Millisecond), "ran 800ms, waited 300ms for a host CPU in 1.2s, now R"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Only a CPU that could take the vector counts toward a loss.
func TestCanTakeInterrupt(t *testing.T) {
	for regs, want := range map[string]bool{
		"RIP=ffffffff81081567 RFL=00000006 [-----P-] CPL=0 II=0 A20=1 SMM=0 HLT=0": false, // in a handler
		"RIP=00000000004d6a3d RFL=00000246 [---Z-P-] CPL=3 II=0 A20=1 SMM=0 HLT=0": true,
		"RIP=ffffffff812e1e9b RFL=00000046 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1": true, // halted
		"EIP=00001000 EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0":         false,
		"no monitor: dial unix: refused":                                           true,
	} {
		if got := canTakeInterrupt(regs); got != want {
			t.Errorf("%q: %v, want %v", regs, got, want)
		}
	}
}

// The watch wakes no CPU that could not take the vector: one that runs
// with interrupts off, or whose vCPU thread the host does not run (here a
// thread named like TCG's vCPU thread that only sleeps).
func TestWatchLeavesAloneWhatIsNoLoss(t *testing.T) {
	named := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		runtime.LockOSThread() // the thread dies with the goroutine, and its name with it
		name := []byte("CPU 0/TCG\x00")
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
			t.Error(err)
		}
		close(named)
		<-done
	}()
	<-named
	for _, tc := range []struct {
		regs            string
		masked, starved bool
	}{
		{"RIP=ffffffff81081567 RFL=00000006 [-----P-] CPL=0 II=0 A20=1 SMM=0 HLT=0", true, false},
		{"RIP=00000000004d6a3d RFL=00000246 [---Z-P-] CPL=3 II=0 A20=1 SMM=0 HLT=0", false, true},
	} {
		f := &fakeMonitor{ppr: 0x10, regs: tc.regs}
		var out syncbuf.Buffer
		w := watchFake(t, f, &serialPort{f: f}, &out, 12)
		if len(w.wakes) != 0 || f.woken.Load() {
			t.Errorf("%s: woken %d times\n%s", tc.regs, len(w.wakes), out.String())
		}
		if (w.masked > 0) != tc.masked || (w.starved > 0) != tc.starved {
			t.Errorf("%s: masked %d, starved %d; want masked %v, starved %v\n%s", tc.regs, w.masked, w.starved, tc.masked, tc.starved, out.String())
		}
	}
}

// A timer vector pending while L1 keeps programming its timer is a timer
// that fires as soon as it is set, not a lost interrupt: only an expired
// timer nobody set again counts.
func TestLostInterruptWatchTimerProgrammedAgain(t *testing.T) {
	read := func(initial, current uint64) lapicState {
		st, ok := parseLapic(strings.ReplaceAll(lapicDumpTimer("236 ", 0x10, initial, current), "\r", ""))
		if !ok || st.TimerVec != 236 || !st.HaveTimer || st.TimerInitial != initial || st.TimerCurrent != current {
			t.Fatalf("parsed %+v ok=%v", st, ok)
		}
		return st
	}
	l := lostInterruptWatch{need: 3}
	for i, s := range []struct {
		st   lapicState
		wake bool
	}{
		{read(1000, 0), false}, {read(1000, 0), false}, {read(1000, 500), false}, // armed again: no loss
		{read(2000, 0), false}, {read(3000, 0), false}, {read(3000, 0), false}, // programmed between reads: counts from 3000
		{read(3000, 0), true}, // expired, never set again, three reads
	} {
		if _, wake := l.sample(0, s.st); wake != s.wake {
			t.Fatalf("read %d: wake %v, want %v", i, wake, s.wake)
		}
	}
	if l.rearmed != 2 {
		t.Errorf("rearmed %d, want 2", l.rearmed)
	}
	// Another vector (the PIT's) does not look at the timer.
	l = lostInterruptWatch{need: 2}
	st, _ := parseLapic(strings.ReplaceAll(lapicDumpTimer("48 ", 0x10, 1000, 500), "\r", ""))
	l.sample(0, st)
	if _, wake := l.sample(0, st); !wake {
		t.Error("vector 48 with the timer armed was not a loss")
	}
}
