package vmm

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"tinyvmm/devices"
	"tinyvmm/internal/syncbuf"
	"tinyvmm/kvm"
)

// fakeExit is one decoded exit, as a vCPU would report it.
type fakeExit struct {
	io   kvm.IOExit
	mmio kvm.MMIOExit
	sys  kvm.SystemEvent
	ie   kvm.InternalError
	fe   kvm.FailEntry
	rip  uint64
}

func (f *fakeExit) ID() int                          { return 1 }
func (f *fakeExit) IO() kvm.IOExit                   { return f.io }
func (f *fakeExit) MMIO() kvm.MMIOExit               { return f.mmio }
func (f *fakeExit) SystemEvent() kvm.SystemEvent     { return f.sys }
func (f *fakeExit) InternalError() kvm.InternalError { return f.ie }
func (f *fakeExit) FailEntry() kvm.FailEntry         { return f.fe }
func (f *fakeExit) Regs() (kvm.Regs, error)          { return kvm.Regs{RIP: f.rip}, nil }

// testMachine is a machine with buses, a UART on COM1 and the exit device,
// and no KVM.
func testMachine(t *testing.T) (*machine, *syncbuf.Buffer) {
	t.Helper()
	var out syncbuf.Buffer
	m := &machine{stop: NewStopOnce(), pio: devices.NewPIOBus(), mmio: devices.NewMMIOBus(), log: &out}
	m.serial = devices.NewSerial(nil, &out)
	m.pio.Register(devices.COM1Port, devices.SerialPorts, m.serial)
	m.pio.Register(devices.ExitPort, 1, devices.NewExitDevice(m.stop.ExitStop))
	m.pio.Register(devices.I8042CommandPort, 1, devices.NewI8042(m.stop.ResetStop))
	return m, &out
}

type memDev struct{ b [16]byte }

func (d *memDev) Read(off uint64, p []byte)  { copy(p, d.b[off:]) }
func (d *memDev) Write(off uint64, p []byte) { copy(d.b[off:], p) }

func stopped(m *machine) (GuestStop, bool) {
	select {
	case <-m.stop.Done():
		return m.stop.Get(), true
	default:
		return GuestStop{}, false
	}
}

func TestExitIOStringOutAndIn(t *testing.T) {
	m, out := testMachine(t)
	// rep outsb of "hey" to COM1: one exit, count 3.
	stop, err := m.handleExit(&fakeExit{io: kvm.IOExit{Port: 0x3f8, Out: true, Size: 1, Count: 3, Data: []byte("hey")}}, kvm.ExitIO)
	if stop || err != nil || out.String() != "hey" {
		t.Fatalf("stop %v err %v console %q", stop, err, out.String())
	}
	// An in from an unclaimed port reads all ones; an in from LSR says THR empty.
	data := []byte{0, 0}
	m.handleExit(&fakeExit{io: kvm.IOExit{Port: 0x3ff + 0x100, Size: 2, Count: 1, Data: data}}, kvm.ExitIO)
	if !bytes.Equal(data, []byte{0xff, 0xff}) {
		t.Fatalf("unclaimed in read %x", data)
	}
	lsr := []byte{0}
	m.handleExit(&fakeExit{io: kvm.IOExit{Port: 0x3fd, Size: 1, Count: 1, Data: lsr}}, kvm.ExitIO)
	if lsr[0]&0x20 == 0 {
		t.Fatalf("LSR %#x lacks THR empty", lsr[0])
	}
	// A malformed exit (size 0, or data shorter than count) must not panic.
	m.handleExit(&fakeExit{io: kvm.IOExit{Port: 0x3f8, Out: true, Size: 0, Count: 5}}, kvm.ExitIO)
	m.handleExit(&fakeExit{io: kvm.IOExit{Port: 0x3f8, Out: true, Size: 4, Count: 5, Data: []byte{1, 2}}}, kvm.ExitIO)
}

func TestExitMMIOReadWrite(t *testing.T) {
	m, _ := testMachine(t)
	d := &memDev{}
	m.mmio.Register(0xc0000000, 16, d)
	m.handleExit(&fakeExit{mmio: kvm.MMIOExit{Addr: 0xc0000004, IsWrite: true, Data: []byte{1, 2, 3, 4}}}, kvm.ExitMMIO)
	got := make([]byte, 4)
	m.handleExit(&fakeExit{mmio: kvm.MMIOExit{Addr: 0xc0000004, Data: got}}, kvm.ExitMMIO)
	if !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Fatalf("read back %x", got)
	}
}

func TestExitDeviceEndsTheGuest(t *testing.T) {
	m, _ := testMachine(t)
	stop, err := m.handleExit(&fakeExit{io: kvm.IOExit{Port: devices.ExitPort, Out: true, Size: 1, Count: 1, Data: []byte{42}}}, kvm.ExitIO)
	if stop || err != nil {
		t.Fatalf("stop %v err %v", stop, err)
	}
	s, ok := stopped(m)
	if status, err := s.Result(); !ok || status != 42 || err != nil {
		t.Fatalf("stop %+v: %d %v", s, status, err)
	}
}

func TestExitShutdownAndSystemEvents(t *testing.T) {
	for _, c := range []struct {
		reason kvm.ExitReason
		sys    kvm.SystemEvent
		want   StopReason
	}{
		{kvm.ExitShutdown, kvm.SystemEvent{}, StopTripleFault},
		{kvm.ExitSystemEvent, kvm.SystemEvent{Type: kvm.SystemEventReset}, StopReboot},
		{kvm.ExitSystemEvent, kvm.SystemEvent{Type: kvm.SystemEventShutdown}, StopPowerOff},
		{kvm.ExitSystemEvent, kvm.SystemEvent{Type: kvm.SystemEventCrash}, StopCrash},
	} {
		m, _ := testMachine(t)
		stop, err := m.handleExit(&fakeExit{sys: c.sys, rip: 0x1234}, c.reason)
		s, ok := stopped(m)
		if !stop || err != nil || !ok || s.Reason != c.want {
			t.Errorf("%v %+v: stop %v err %v, got %+v", c.reason, c.sys, stop, err, s)
		}
	}
	m, _ := testMachine(t)
	m.handleExit(&fakeExit{rip: 0xffffffff81000000}, kvm.ExitShutdown)
	_, err := m.stop.Get().Result()
	if err == nil || !strings.Contains(err.Error(), "triple-fault") || !strings.Contains(err.Error(), "0xffffffff81000000") {
		t.Fatalf("triple fault error %v", err)
	}
	m, _ = testMachine(t)
	m.handleExit(&fakeExit{io: kvm.IOExit{Port: 0x64, Out: true, Size: 1, Count: 1, Data: []byte{0xfe}}}, kvm.ExitIO)
	if _, err := m.stop.Get().Result(); !errors.Is(err, ErrGuestRebooted) {
		t.Fatalf("i8042 reset: %v", err)
	}
}

func TestExitErrorsNameTheVCPU(t *testing.T) {
	m, _ := testMachine(t)
	m.host.PVM = true
	stop, err := m.handleExit(&fakeExit{ie: kvm.InternalError{Suberror: kvm.InternalErrorEmulation}, rip: 0xabc}, kvm.ExitInternalError)
	if !stop || err == nil || !strings.Contains(err.Error(), "RIP 0xabc") || !strings.Contains(err.Error(), "PVM") {
		t.Fatalf("internal error: stop %v err %v", stop, err)
	}
	stop, err = m.handleExit(&fakeExit{fe: kvm.FailEntry{Reason: 0x21}}, kvm.ExitFailEntry)
	if !stop || err == nil || !strings.Contains(err.Error(), "0x21") {
		t.Fatalf("fail entry: %v", err)
	}
	stop, err = m.handleExit(&fakeExit{}, kvm.ExitReason(99))
	if !stop || err == nil {
		t.Fatalf("unknown exit: %v", err)
	}
	if stop, err := m.handleExit(&fakeExit{}, kvm.ExitIntr); stop || err != nil {
		t.Fatalf("EINTR exit stopped the vCPU: %v", err)
	}
}

func TestExitCounts(t *testing.T) {
	var c exitCounts
	c.add(kvm.ExitIO)
	c.add(kvm.ExitIO)
	c.add(kvm.ExitReason(1000)) // out of range: ignored
	if s := c.snapshot(); s["KVM_EXIT_IO"] != 2 || len(s) != 1 {
		t.Fatalf("snapshot %v", s)
	}
}

// Every thread that blocks in the kernel (vCPUs, device workers) gets a P
// of its own, and two more for the rest, even on a 1-CPU host.
func TestReserveProcs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	reserveProcs(3)
	if n := runtime.GOMAXPROCS(0); n != 5 {
		t.Errorf("GOMAXPROCS %d after reserving 3 blocked threads on 1 CPU, want 5", n)
	}
	runtime.GOMAXPROCS(64)
	reserveProcs(3)
	if n := runtime.GOMAXPROCS(0); n != 64 {
		t.Errorf("GOMAXPROCS lowered to %d, want 64 kept", n)
	}
}
