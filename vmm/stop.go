package vmm

import (
	"errors"
	"fmt"
	"sync"
)

// StopReason says why a guest stopped.
type StopReason int

const (
	// StopExitDevice: the guest wrote its exit status to devices.ExitPort.
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

// ExitStop is what the exit device's write of status means: the guest's
// own end, with its status.
func (o *StopOnce) ExitStop(status int) { o.Stop(GuestStop{Reason: StopExitDevice, Status: status}) }

// ResetStop is what an i8042 reset means: a reboot, which tinyvmm does not
// do.
func (o *StopOnce) ResetStop() { o.Stop(GuestStop{Reason: StopReboot, Detail: "i8042 reset"}) }
