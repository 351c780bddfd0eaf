package main

import (
	"strings"
	"testing"

	"tinyvmm/virtionet"
	"tinyvmm/vmm"
)

// --net ...,io= picks how the device moves tap frames (a tap defaults to
// io_uring); bad values are one line each.
func TestNetIOOption(t *testing.T) {
	for _, tc := range []struct {
		arg, io, err string
	}{
		{"tap=t0", virtionet.IOUring, ""},
		{"af_packet=v0", "", ""},
		{"tap=t0,io=uring", virtionet.IOUring, ""},
		{"tap=t0,io=writev,mtu=9000", virtionet.IOWritev, ""},
		{"tap=t0,io=epoll", "", "use writev"},
		{"af_packet=v0,io=uring", "", "io=uring is for a tap"},
	} {
		var nets []vmm.NetConfig
		err := netsValue{&nets}.Set(tc.arg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("--net %s: error %v, want one line with %q", tc.arg, err, tc.err)
			}
			continue
		}
		if err != nil || len(nets) != 1 || nets[0].IO != tc.io {
			t.Errorf("--net %s: %+v, %v; want io %q", tc.arg, nets, err, tc.io)
		}
	}
}
