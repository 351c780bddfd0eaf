package bootbench

import (
	"strings"
	"testing"

	"tinyvmm/kvm"
)

// A missing /dev/kvm is said as such, even with the kvm_pvm module loaded.
func TestUnfit(t *testing.T) {
	missing := "no /dev/kvm on this machine"
	for _, c := range []struct {
		host kvm.Host
		want string
	}{
		{kvm.Host{Why: missing}, missing},
		{kvm.Host{Why: missing, PVM: true}, missing},
		{kvm.Host{Usable: true, PVM: true}, "PVM"},
		{kvm.Host{Usable: true}, ""},
	} {
		got := unfit(c.host)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.host, got, c.want)
		}
	}
}
