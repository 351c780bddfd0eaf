package devices

import (
	"errors"
	"fmt"
	"sync"
)

// Ports of the devices that end the guest.
const (
	// ExitPort is tinyvmm's exit device: a 1..4-byte write of N ends the VM
	// and tinyvmm exits with status N&0xff. The guest's init writes its
	// command's status there through /dev/port.
	ExitPort = 0x501
	// I8042CommandPort is the PC keyboard controller's command port; the
	// command 0xfe pulses the CPU reset line (Linux reboot=k).
	I8042CommandPort = 0x64
	i8042Reset       = 0xfe
)

// StopReason says why a guest stopped.
type StopReason int

const (
	// StopExitDevice: the guest wrote its exit status to ExitPort.
	StopExitDevice StopReason = iota + 1
	// StopReboot: the guest rebooted (i8042 reset, KVM_SYSTEM_EVENT reset).
	StopReboot
	// StopPowerOff: the guest powered off (KVM_SYSTEM_EVENT shutdown).
	StopPowerOff
	// StopTripleFault: the CPU shut down (KVM_EXIT_SHUTDOWN), nearly always
	// a triple fault: the guest kernel crashed before it could say why.
	StopTripleFault
	// StopCrash: the guest reported a crash (KVM_SYSTEM_EVENT crash).
	StopCrash
	// StopPanic: the guest kernel panicked (its console said so, then it
	// rebooted: tinyvmm boots Linux with panic=-1).
	StopPanic
	// StopNoInit: the guest kernel panicked because it found no init to
	// run (no /init in the initramfs and no root file system, or the one
	// given could not be executed).
	StopNoInit
)

// Exit statuses for guests that did not end by themselves. They sit below
// the guest init's own (125 bad command line, 126 cannot execute, 127 not
// found) and take 124 for a timeout as timeout(1) does. A command that
// exits with one of these itself is told apart by the line on stderr.
const (
	StatusPanic       = 121
	StatusNoInit      = 122
	StatusTripleFault = 123
	StatusTimeout     = 124
)

// GuestError is how a guest ended badly: the status tinyvmm exits with and
// the one line it prints.
type GuestError struct {
	Status int
	Msg    string
}

func (e *GuestError) Error() string { return e.Msg }

// GuestStop is how the guest ended.
type GuestStop struct {
	Reason StopReason
	Status int    // StopExitDevice: the guest's status, 0..255
	Detail string // e.g. the vCPU and RIP of a triple fault
}

// ErrGuestRebooted is the error for a guest that rebooted.
var ErrGuestRebooted = errors.New("guest rebooted; tinyvmm does not restart guests")

// Result turns a stop into tinyvmm's exit status and error: the status for
// the exit device, 0 for a power-off or reboot (with ErrGuestRebooted so
// the user sees why), and a *GuestError for a triple fault, panic or crash.
func (s GuestStop) Result() (int, error) {
	switch s.Reason {
	case StopExitDevice:
		return s.Status, nil
	case StopPowerOff:
		return 0, nil
	case StopReboot:
		return 0, ErrGuestRebooted
	case StopTripleFault:
		return guestError(StatusTripleFault, "guest triple-faulted (%s): its kernel crashed early; check --kernel, --append and the console output above", s.Detail)
	case StopCrash:
		return guestError(StatusPanic, "guest reported a crash (%s)", s.Detail)
	case StopPanic:
		return guestError(StatusPanic, "guest kernel panic: %s", s.Detail)
	case StopNoInit:
		return guestError(StatusNoInit, "guest kernel found no init to run: %s", s.Detail)
	}
	return 1, fmt.Errorf("guest stopped for an unknown reason %d", s.Reason)
}

func guestError(status int, format string, args ...any) (int, error) {
	return status, &GuestError{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// ExitDevice is the device at ExitPort. It calls stop once per write; the
// VMM keeps the first stop.
type ExitDevice struct {
	stop func(GuestStop)
}

// NewExitDevice makes the exit device; stop is called from a vCPU thread.
func NewExitDevice(stop func(GuestStop)) *ExitDevice { return &ExitDevice{stop: stop} }

// Read implements BusDevice: the port reads as 0.
func (d *ExitDevice) Read(offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
	}
}

// Write implements BusDevice: a 1..4-byte little-endian value ends the VM.
func (d *ExitDevice) Write(offset uint64, data []byte) {
	if offset != 0 || len(data) < 1 || len(data) > 4 {
		return
	}
	var n uint32
	for i, b := range data {
		n |= uint32(b) << (8 * i)
	}
	d.stop(GuestStop{Reason: StopExitDevice, Status: int(n & 0xff)})
}

// I8042 is just enough of the PC keyboard controller for a reboot: the
// status port reads 0 (input buffer empty, so Linux's kb_wait does not
// spin) and command 0xfe resets the machine.
type I8042 struct {
	stop func(GuestStop)
}

// NewI8042 makes the reset-only keyboard controller at I8042CommandPort.
func NewI8042(stop func(GuestStop)) *I8042 { return &I8042{stop: stop} }

// Read implements BusDevice.
func (d *I8042) Read(offset uint64, data []byte) {
	for i := range data {
		data[i] = 0
	}
}

// Write implements BusDevice.
func (d *I8042) Write(offset uint64, data []byte) {
	if offset == 0 && len(data) >= 1 && data[0] == i8042Reset {
		d.stop(GuestStop{Reason: StopReboot, Detail: "i8042 reset"})
	}
}

// StopOnce keeps the first of several stops (vCPUs may race to stop the
// guest) and signals Done.
type StopOnce struct {
	once sync.Once
	done chan struct{}
	stop GuestStop
}

// NewStopOnce makes an unset StopOnce.
func NewStopOnce() *StopOnce { return &StopOnce{done: make(chan struct{})} }

// Stop records s if it is the first stop.
func (o *StopOnce) Stop(s GuestStop) {
	o.once.Do(func() {
		o.stop = s
		close(o.done)
	})
}

// Done is closed by the first Stop.
func (o *StopOnce) Done() <-chan struct{} { return o.done }

// Get returns the first stop; valid after Done is closed.
func (o *StopOnce) Get() GuestStop {
	<-o.done
	return o.stop
}
