package main

import (
	"strings"
	"testing"

	"tinyvmm/ratelimit"
	"tinyvmm/virtionet"
	"tinyvmm/vmm"
)

// --net ...,io= picks how the device moves tap frames (a tap defaults to
// io_uring, af_packet always batches with sendmmsg: the device's config
// fills that in); bad values are one line each.
func TestNetIOOption(t *testing.T) {
	for _, tc := range []struct {
		arg string
		io  virtionet.IOMode
		err string
	}{
		{"tap=t0", virtionet.IOUring, ""},
		{"af_packet=v0", virtionet.IOSendmmsg, ""},
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
		if err != nil || len(nets) != 1 {
			t.Fatalf("--net %s: %+v, %v", tc.arg, nets, err)
		}
		if c, err := nets[0].Config.Normalized(); err != nil || c.IO != tc.io {
			t.Errorf("--net %s: io %q, %v; want io %q", tc.arg, c.IO, err, tc.io)
		}
	}
}

// Config.Validate refuses what New would refuse, without opening a file:
// an mtu outside 68..65535 and negative tuning values.
func TestValidateNetConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		net  virtionet.Config
		want string
	}{
		{"mtu 67", virtionet.Config{Ifname: "t0", MTU: 67}, "mtu 67 is outside 68..65535"},
		{"mtu 70000", virtionet.Config{Ifname: "t0", MTU: 70000}, "mtu 70000 is outside"},
		{"rx batch -1", virtionet.Config{Ifname: "t0", Tuning: virtionet.Tuning{RxBatch: -1}}, "must not be negative"},
		{"tx weight -5", virtionet.Config{Ifname: "t0", Tuning: virtionet.Tuning{TxWeightPkts: -5}}, "must not be negative"},
		{"good", virtionet.Config{Ifname: "t0", MTU: 9000, Tuning: virtionet.DefaultTuning()}, ""},
	} {
		cfg := vmm.Config{Kernel: "/no/such/kernel", MemBytes: 256 << 20, CPUs: 1, Nets: []vmm.NetConfig{{Config: tc.net}}}
		err := cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// --net ...,pcap= and the rate limits reach the device's Config; a bad
// rate is one line naming its key.
func TestNetCaptureAndRateOptions(t *testing.T) {
	var nets []vmm.NetConfig
	err := netsValue{&nets}.Set("tap=t0,pcap=/tmp/x.pcap,rx-rate=10M/s:64Ki,tx-rate=1G,rx-pps=1000,tx-pps=5k:50")
	if err != nil || len(nets) != 1 {
		t.Fatalf("%+v, %v", nets, err)
	}
	c := nets[0].Config
	want := virtionet.Config{Ifname: "t0", IO: virtionet.IOUring, Pcap: "/tmp/x.pcap",
		RxLimit: ratelimit.Limit{Bytes: ratelimit.Bucket{Rate: 10e6, Burst: 64 << 10}, Frames: ratelimit.Bucket{Rate: 1000}},
		TxLimit: ratelimit.Limit{Bytes: ratelimit.Bucket{Rate: 1e9}, Frames: ratelimit.Bucket{Rate: 5000, Burst: 50}}}
	if c.Pcap != want.Pcap || c.RxLimit != want.RxLimit || c.TxLimit != want.TxLimit {
		t.Errorf("got pcap %q rx %+v tx %+v; want %q %+v %+v", c.Pcap, c.RxLimit, c.TxLimit, want.Pcap, want.RxLimit, want.TxLimit)
	}
	for arg, msg := range map[string]string{
		"tap=t0,rx-rate=fast":   "--net rx-rate: rate",
		"tap=t0,tx-pps=10:zero": "--net tx-pps: burst",
		"tap=t0,pcap=":          "expected tap=NAME",
	} {
		err := netsValue{&nets}.Set(arg)
		if err == nil || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--net %s: error %v, want one line with %q", arg, err, msg)
		}
	}
}

// --net ...,queues=N reaches the device's Config; 0, too many and a
// queues= that cannot be had (with pcap) are one line each. Without it
// the VMM picks one pair per vCPU, up to 8.
func TestNetQueuesOption(t *testing.T) {
	var nets []vmm.NetConfig
	if err := (netsValue{&nets}).Set("tap=t0,queues=4"); err != nil || nets[0].Queues != 4 {
		t.Fatalf("%+v, %v", nets, err)
	}
	for _, arg := range []string{"tap=t0,queues=0", "tap=t0,queues=17", "tap=t0,queues=two"} {
		err := netsValue{&nets}.Set(arg)
		if err == nil || !strings.Contains(err.Error(), "--net queues=") || strings.Contains(err.Error(), "\n") {
			t.Errorf("--net %s: error %v", arg, err)
		}
	}
	c := virtionet.Config{Ifname: "t0", Queues: 2, Pcap: "/tmp/x.pcap"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "queues=1") {
		t.Errorf("queues=2 with pcap: %v", err)
	}
	for _, tc := range []struct {
		c    virtionet.Config
		cpus int
		want int
	}{
		{virtionet.Config{Ifname: "t0"}, 1, 1}, {virtionet.Config{Ifname: "t0"}, 2, 2},
		{virtionet.Config{Ifname: "t0"}, 64, 8}, {virtionet.Config{AFPacket: "eth0"}, 4, 1},
		{virtionet.Config{Ifname: "t0", Pcap: "x"}, 4, 1},
	} {
		if got := virtionet.DefaultQueues(tc.c, tc.cpus); got != tc.want {
			t.Errorf("DefaultQueues(%+v, %d) = %d, want %d", tc.c, tc.cpus, got, tc.want)
		}
	}
}
