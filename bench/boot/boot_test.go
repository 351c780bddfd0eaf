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

// tinyvmm-user boots as tinyvmm does, with --net user before the command.
func TestTinyvmmUserHasAUserNet(t *testing.T) {
	b := &bencher{tinyvmm: "/bin/tinyvmm", kernel: "vmlinux", initrd: "initrd", o: Options{MemMiB: 64}}
	plain := strings.Join(b.command(SysTinyvmm, "DIR"), " ")
	user := strings.Join(b.command(SysTinyvmmUser, "DIR"), " ")
	if strings.Contains(plain, "--net") {
		t.Errorf("tinyvmm: %s", plain)
	}
	if want := strings.TrimSuffix(plain, " -- true") + " --net user -- true"; user != want {
		t.Errorf("tinyvmm-user: %s\nwant %s", user, want)
	}
}
