package devices

import (
	"errors"
	"strings"
	"testing"
)

func TestExitDeviceStatus(t *testing.T) {
	for _, c := range []struct {
		data []byte
		want int
	}{
		{[]byte{7}, 7},
		{[]byte{0x01, 0x01}, 1},                // 0x101 & 0xff
		{[]byte{0xff, 0xff, 0xff, 0xff}, 0xff}, // -1
		{[]byte{0, 1, 0, 0}, 0},
	} {
		var got []GuestStop
		d := NewExitDevice(func(s GuestStop) { got = append(got, s) })
		d.Write(0, c.data)
		if len(got) != 1 || got[0].Reason != StopExitDevice || got[0].Status != c.want {
			t.Errorf("write %x: stops %+v, want status %d", c.data, got, c.want)
		}
		status, err := got[0].Result()
		if status != c.want || err != nil {
			t.Errorf("Result() = %d, %v", status, err)
		}
	}
}

func TestExitDeviceIgnoresBadWrites(t *testing.T) {
	n := 0
	d := NewExitDevice(func(GuestStop) { n++ })
	d.Write(0, nil)
	d.Write(0, make([]byte, 8))
	d.Write(1, []byte{3})
	b := []byte{9, 9}
	d.Read(0, b)
	if n != 0 || b[0] != 0 || b[1] != 0 {
		t.Fatalf("%d stops, read %x", n, b)
	}
}

func TestI8042ResetAndStatus(t *testing.T) {
	var got []GuestStop
	d := NewI8042(func(s GuestStop) { got = append(got, s) })
	st := []byte{0xff}
	d.Read(0, st)
	if st[0]&0x02 != 0 {
		t.Fatal("status says input buffer full: Linux's kb_wait would spin")
	}
	d.Write(0, []byte{0x60})
	if len(got) != 0 {
		t.Fatal("a non-reset command stopped the guest")
	}
	d.Write(0, []byte{0xfe})
	if len(got) != 1 || got[0].Reason != StopReboot {
		t.Fatalf("stops %+v", got)
	}
	if _, err := got[0].Result(); !errors.Is(err, ErrGuestRebooted) {
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
