package main

import (
	"strings"
	"testing"

	"tinyvmm/userproc"
	"tinyvmm/vmm"
)

// --net user takes hostfwd= (QEMU's syntax, TCP, host loopback by
// default) and the device's own keys; each user network gets a name.
func TestNetUserOptions(t *testing.T) {
	var nets []vmm.NetConfig
	for _, arg := range []string{
		"user,hostfwd=tcp:127.0.0.1:8080-:80,hostfwd=tcp::2222-10.0.2.15:22,mtu=9000,restrict=on",
		"user",
	} {
		if err := (netsValue{&nets}).Set(arg); err != nil {
			t.Fatalf("--net %s: %v", arg, err)
		}
	}
	if len(nets) != 2 || nets[0].User == nil || nets[1].User == nil {
		t.Fatalf("%+v", nets)
	}
	want := []userproc.Forward{{Host: "127.0.0.1:8080", GuestPort: 80}, {Host: "127.0.0.1:2222", GuestPort: 22}}
	if got := nets[0].User.Forwards; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("forwards %+v, want %+v", got, want)
	}
	if !nets[0].User.Restrict || nets[1].User.Restrict {
		t.Errorf("restrict %v %v, want on for the first only", nets[0].User.Restrict, nets[1].User.Restrict)
	}
	if nets[0].MTU != 9000 || nets[0].Ifname != "user0" || nets[1].Ifname != "user1" || nets[0].IO != "" {
		t.Errorf("mtu %d, names %q %q, io %q", nets[0].MTU, nets[0].Ifname, nets[1].Ifname, nets[0].IO)
	}
	cfg := vmm.Config{Kernel: "/no/such/kernel", MemBytes: 256 << 20, CPUs: 1, Nets: nets}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestNetUserRefusals(t *testing.T) {
	for arg, msg := range map[string]string{
		"user,hostfwd=udp::53-:53":          "only tcp",
		"user,hostfwd=tcp:127.0.0.1:80":     "no '-'",
		"user,hostfwd=tcp:127.0.0.1:x-:80":  "host port x",
		"user,hostfwd=tcp:localhost:80-:80": "not an IPv4 address",
		"user,hostfwd=tcp::80-:0":           "guest port 0",
		"user,hostfwd=tcp::80-10.0.2.16:80": "the guest's address is 10.0.2.15",
		"user,hostfwd=tcp::80-:70000":       "guest port 70000",
		"user,tap=t0":                       "takes no tap=",
		"user,io=uring":                     "takes no tap=, af_packet= or io=",
		"tap=t0,hostfwd=tcp::80-:80":        "hostfwd= is for a user network",
		"tap=t0,restrict=on":                "restrict= is for a user network",
		"user,restrict=maybe":               "use on",
		"usr":                               "did you mean --net user?",
		"mtu=1500,user":                     "expected tap=NAME",
	} {
		var nets []vmm.NetConfig
		err := netsValue{&nets}.Set(arg)
		if err == nil || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--net %s: error %v, want one line with %q", arg, err, msg)
		}
	}
}
