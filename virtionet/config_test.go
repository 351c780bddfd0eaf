package virtionet

import (
	"strings"
	"testing"
)

func TestConfigIO(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Ifname: "t0"}, ""},
		{Config{Ifname: "t0", IO: "uring"}, ""},
		{Config{Ifname: "t0", IO: "aio"}, `io "aio": use writev or uring`},
		{Config{Ifname: "v0", AFPacket: "v0", IO: "uring"}, "io=uring is for a tap"},
	} {
		c, err := tc.cfg.normalized()
		if tc.want == "" && (err != nil || (tc.cfg.IO == "" && c.IO != IOWritev)) {
			t.Errorf("%+v: %v, io %q", tc.cfg, err, c.IO)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
