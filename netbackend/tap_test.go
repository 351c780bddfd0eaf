package netbackend_test

import (
	"net"
	"strings"
	"testing"

	"tinyvmm/internal/netnstest"
	"tinyvmm/netbackend"
)

// OpenTap creates a tap that is missing and says so; a second open of a
// tap in use fails in one line that says it is busy; closing a tap it
// created deletes it.
func TestTapCreatedWhenMissingAndBusyWhenTaken(t *testing.T) {
	ns := netnstest.Setup(t)
	var tap *netbackend.Tap
	if err := ns.Do(func() error {
		var err error
		tap, err = netbackend.OpenTap("tvtap7", 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := tap.Opened(); got != "created tvtap7" || !tap.Created {
		t.Errorf("Opened() = %q, Created %v; want it to say it created the tap", got, tap.Created)
	}
	err := ns.Do(func() error {
		second, err := netbackend.OpenTap("tvtap7", 0)
		if err == nil {
			second.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "busy") || strings.Contains(err.Error(), "\n") {
		t.Errorf("second open: %v, want a one-line busy error", err)
	}
	tap.Close()
	ns.Do(func() error {
		if _, err := net.InterfaceByName("tvtap7"); err == nil {
			t.Error("a tap we created outlived its Close")
		}
		return nil
	})
}
