package virtionet

import (
	"bytes"
	"strings"
	"testing"

	"tinyvmm/netbackend"
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
		{Config{Ifname: "user0", User: true, IO: "writev"}, "a user network takes no io="},
	} {
		c, err := tc.cfg.Normalized()
		if tc.want == "" && (err != nil || (tc.cfg.IO == "" && c.IO != DefaultIO)) {
			t.Errorf("%+v: %v, io %q", tc.cfg, err, c.IO)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// Normalized states the I/O once: a tap gets DefaultIO, a socket backend
// sendmmsg whatever it asked, and a normalized config is taken as it is.
func TestNormalizedIOAndOnce(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want IOMode
	}{
		{Config{Ifname: "t0"}, DefaultIO},
		{Config{Ifname: "t0", IO: IOWritev}, IOWritev},
		{Config{AFPacket: "v0"}, IOSendmmsg},
		{Config{AFPacket: "v0", IO: IOWritev}, IOSendmmsg},
		{Config{Ifname: "user0", User: true}, IOSendmmsg},
	} {
		c, err := tc.cfg.Normalized()
		if err != nil || c.IO != tc.want {
			t.Errorf("%+v: io %q, %v; want %q", tc.cfg, c.IO, err, tc.want)
		}
	}
	c, err := Config{Ifname: "t0"}.Normalized()
	if err != nil {
		t.Fatal(err)
	}
	c.MTU = 1 // changed after normalizing: not looked at again
	if again, err := c.Normalized(); err != nil || again.MTU != 1 {
		t.Errorf("a normalized config was normalized again: mtu %d, %v", again.MTU, err)
	}
}

func TestFeaturesFollowBackendOffloads(t *testing.T) {
	if f := offeredFeatures(0); f&(FeatCsum|FeatGuestCsum|FeatHostTSO4|FeatGuestTSO4|FeatHostTSO6|FeatGuestTSO6) != 0 {
		t.Errorf("offloads offered without tap support: %#x", f)
	}
	f := offeredFeatures(tunFCsum | tunFTSO4)
	if f&(FeatCsum|FeatGuestCsum|FeatHostTSO4|FeatGuestTSO4) == 0 || f&(FeatHostTSO6|FeatGuestTSO6) != 0 {
		t.Errorf("csum+tso4 tap: features %#x", f)
	}
	for _, bit := range []uint64{FeatMAC, FeatStatus, FeatMTU, FeatMrgRxBuf, FeatEventIdx, FeatIndirectDesc, FeatVersion1} {
		if f&bit == 0 {
			t.Errorf("feature %#x not offered", bit)
		}
	}
	if got := tunOffloadsFor(FeatGuestCsum | FeatGuestTSO6 | FeatHostTSO4); got != tunFCsum|tunFTSO6 {
		t.Errorf("offloads for acked features: %#x", got)
	}
	if got := tunOffloadsFor(FeatGuestTSO4); got != 0 {
		t.Errorf("TSO without GUEST_CSUM gave offloads %#x", got)
	}
}

func TestConfigSpaceLayout(t *testing.T) {
	sp, _ := netbackend.NewSocketPair()
	mac := []byte{0x52, 0x54, 0, 1, 2, 3}
	d, err := New(Config{MAC: mac, MTU: 9000}, sp)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := make([]byte, 16)
	d.ReadConfig(0, b)
	want := []byte{0x52, 0x54, 0, 1, 2, 3, 1, 0, 1, 0, 0x28, 0x23, 0, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Errorf("config %x, want %x", b, want)
	}
	one := make([]byte, 2)
	d.ReadConfig(10, one)
	if one[0] != 0x28 || one[1] != 0x23 {
		t.Errorf("mtu read at offset 10: %x", one)
	}
	d.ReadConfig(1<<63, one) // far past the end: zeros, no panic
	if d.Type() != 1 || len(d.QueueMaxSizes()) != 2 {
		t.Errorf("type %d, %d queues", d.Type(), len(d.QueueMaxSizes()))
	}
}

func TestDefaultMACIsStableAndLocal(t *testing.T) {
	a, b, c := DefaultMAC("tap0"), DefaultMAC("tap0"), DefaultMAC("tap1")
	if a.String() != b.String() || a.String() == c.String() {
		t.Errorf("macs %v %v %v", a, b, c)
	}
	if a[0]&2 == 0 || a[0]&1 != 0 {
		t.Errorf("mac %v is not locally administered unicast", a)
	}
	if _, err := ParseMAC("01:00:00:00:00:01"); err == nil {
		t.Error("multicast mac accepted")
	}
}

// A user network counts a tx run of DefaultUserBatchBytes or more as a
// burst unless told otherwise; a tap keeps the rule of frames alone.
func TestWorkerBatchBytesDefault(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want int
	}{
		{Config{Ifname: "user0", User: true}, DefaultUserBatchBytes},
		{Config{Ifname: "user0", User: true, Tuning: Tuning{WorkerBatchBytes: -1}}, -1},
		{Config{Ifname: "user0", User: true, Tuning: Tuning{WorkerBatchBytes: 4096}}, 4096},
		{Config{Ifname: "t0"}, 0},
		{Config{Ifname: "t0", Tuning: Tuning{WorkerBatchBytes: 2048}}, 2048},
	} {
		c, err := tc.cfg.Normalized()
		if err != nil {
			t.Fatal(err)
		}
		if c.WorkerBatchBytes != tc.want {
			t.Errorf("%s (user %v, asked %d): WorkerBatchBytes %d, want %d", tc.cfg.Ifname, tc.cfg.User, tc.cfg.WorkerBatchBytes, c.WorkerBatchBytes, tc.want)
		}
	}
}
