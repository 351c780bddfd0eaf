package vmm

import (
	"errors"
	"strings"
	"testing"
)

func TestExitAndResetStops(t *testing.T) {
	o := NewStopOnce()
	o.ExitStop(7)
	if s, err := o.Get().Result(); s != 7 || err != nil {
		t.Fatalf("exit stop: %d %v", s, err)
	}
	o = NewStopOnce()
	o.ResetStop()
	if _, err := o.Get().Result(); !errors.Is(err, ErrGuestRebooted) {
		t.Fatalf("reboot result %v", err)
	}
}

func TestStopResults(t *testing.T) {
	if s, err := (GuestStop{Reason: StopPowerOff}).Result(); s != 0 || err != nil {
		t.Errorf("power off: %d %v", s, err)
	}
	for _, c := range []struct {
		stop   GuestStop
		status int
		text   string
	}{
		{GuestStop{Reason: StopTripleFault, Detail: "vCPU 0 at RIP 0x1000"}, StatusTripleFault, "triple-faulted"},
		{GuestStop{Reason: StopPanic, Detail: "Attempted to kill init!"}, StatusPanic, "kernel panic: Attempted to kill init!"},
		{GuestStop{Reason: StopNoInit, Detail: "No working init found."}, StatusNoInit, "no init to run: No working init found."},
	} {
		s, err := c.stop.Result()
		var ge *GuestError
		if s != c.status || !errors.As(err, &ge) || ge.Status != c.status || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%+v: %d %v", c.stop, s, err)
		}
	}
	if _, err := (GuestStop{}).Result(); err == nil {
		t.Error("zero stop has no error")
	}
}

func TestStopOnceKeepsFirst(t *testing.T) {
	o := NewStopOnce()
	done := make(chan struct{})
	for i := 0; i < 4; i++ {
		go func() { o.Stop(GuestStop{Reason: StopExitDevice, Status: 3}); done <- struct{}{} }()
	}
	for i := 0; i < 4; i++ {
		<-done
	}
	o.Stop(GuestStop{Reason: StopReboot})
	<-o.Done()
	if got := o.Get(); got.Reason != StopExitDevice || got.Status != 3 {
		t.Fatalf("kept %+v", got)
	}
}
