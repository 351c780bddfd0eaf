package bootbench

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"
)

const traceLog = `13219@1796266204.126953:fw_cfg_select 0x56008d1646c0 key 0x0000 'signature', ret: 1
qemu-system-x86_64: a message that is not a trace line
13221@1796266207.952771:fw_cfg_select 0x56008d1646c0 key 0x0008 'kernel_size', ret: 1
13221@1796266207.952780:fw_cfg_select 0x56008d1646c0 key 0x0010 'kernel_entry', ret: 1
13221@1796266207.952790:fw_cfg_read 0x56008d1646c0 0x0
13221@1796266209.000001:fw_cfg_select 0x56008d1646c0 key 0x0019 'file_dir', ret: 1
`

func TestLastTraceEvent(t *testing.T) {
	got, ok := lastTraceEvent(strings.NewReader(traceLog), "fw_cfg_select", time.Time{})
	if want := time.Unix(1796266209, 1000); !ok || !got.Equal(want) {
		t.Fatalf("no limit: %v %v, want %v", got, ok, want)
	}
	// A select after /init started (a reboot's firmware, say) is not the hand-over.
	got, ok = lastTraceEvent(strings.NewReader(traceLog), "fw_cfg_select", time.Unix(1796266208, 0))
	if want := time.Unix(1796266207, 952780000); !ok || !got.Equal(want) {
		t.Fatalf("limited: %v %v, want %v", got, ok, want)
	}
	if _, ok := lastTraceEvent(strings.NewReader(traceLog), "kvm_run_exit", time.Time{}); ok {
		t.Fatal("found an event that is not in the log")
	}
	// Without -msg timestamp=on the lines carry no time: nothing is found.
	if _, ok := lastTraceEvent(strings.NewReader("fw_cfg_select 0x1 key 0x0 'x', ret: 1\n"), "fw_cfg_select", time.Time{}); ok {
		t.Fatal("found a time in a line without one")
	}
}

// fakeQEMU answers QMP on the far end of a pipe the way QEMU 7.2 does.
func fakeQEMU(t *testing.T, c net.Conn, statsReply string) {
	t.Helper()
	go func() {
		defer c.Close()
		dec := json.NewDecoder(c)
		c.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}` + "\n"))
		for {
			var cmd struct {
				Execute string `json:"execute"`
			}
			if dec.Decode(&cmd) != nil {
				return
			}
			switch cmd.Execute {
			case "qmp_capabilities":
				c.Write([]byte(`{"return": {}}` + "\n"))
			case "query-stats":
				c.Write([]byte(`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESUME"}` + "\n"))
				c.Write([]byte(statsReply + "\n"))
			default:
				c.Write([]byte(`{"error": {"class": "CommandNotFound", "desc": "The command ` + cmd.Execute + ` has not been found"}}` + "\n"))
			}
		}
	}()
}

func TestQMPStatsSumsVCPUs(t *testing.T) {
	a, b := net.Pipe()
	fakeQEMU(t, b, `{"return": [
		{"provider": "kvm", "qom-path": "/machine/unattached/device[0]", "stats": [
			{"name": "exits", "value": 100}, {"name": "io_exits", "value": 40},
			{"name": "halt_poll_success_hist", "value": [1, 2, 3]}]},
		{"provider": "kvm", "qom-path": "/machine/unattached/device[1]", "stats": [
			{"name": "exits", "value": 11}, {"name": "io_exits", "value": 2}]}]}`)
	q, err := newQMP(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.vcpuStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["exits"] != 111 || got["io_exits"] != 42 {
		t.Fatalf("got %v", got)
	}
	if _, err := q.call(`{"execute":"nonsense"}`); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("an error reply gave %v", err)
	}
}

func TestQMPStatsWithoutKVMIsAnError(t *testing.T) {
	if _, err := sumQMPStats(json.RawMessage(`[]`)); err == nil {
		t.Fatal("no error for an empty answer")
	}
	if _, err := sumQMPStats(json.RawMessage(`{"x":1}`)); err == nil {
		t.Fatal("no error for a malformed answer")
	}
}

func TestQMPWithoutGreetingIsAnError(t *testing.T) {
	if _, err := newQMP(&rw{strings.NewReader(`{"return": {}}`), &bytes.Buffer{}}); err == nil {
		t.Fatal("no error without a greeting")
	}
}

type rw struct {
	*strings.Reader
	*bytes.Buffer
}

func (x *rw) Read(p []byte) (int, error) { return x.Reader.Read(p) }

func TestStatusKiB(t *testing.T) {
	st := "Name:\tqemu-system-x86\nVmPeak:\t  900000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   30000 kB\n"
	if v, err := statusKiB(strings.NewReader(st), "VmHWM"); err != nil || v != 40960 {
		t.Fatalf("VmHWM = %d, %v", v, err)
	}
	if _, err := statusKiB(strings.NewReader(st), "VmSwap"); err == nil {
		t.Fatal("no error for a missing field")
	}
}

const smaps = `55d0c0000000-55d0c0800000 r-xp 00000000 00:1a 1234                       /usr/bin/qemu-system-x86_64
Size:               8192 kB
Rss:                6000 kB
7f0000000000-7f0010200000 rw-p 00000000 00:00 0 
Size:             264192 kB
Rss:               30000 kB
Pss:               30000 kB
7f0020000000-7f0030000000 rw-p 00000000 00:00 0                          [anon:guest]
Size:             262144 kB
Rss:               20000 kB
7f0040000000-7f0040800000 rw-p 00000000 00:00 0 
Size:               8192 kB
Rss:                8000 kB
7f0050000000-7f0080000000 rw-s 00000000 00:05 99                         /memfd:big (deleted)
Size:             786432 kB
Rss:                   0 kB
`

func TestGuestRAMResidentPicksTheSmallestBigAnonMapping(t *testing.T) {
	got, err := guestRAMResidentKiB(strings.NewReader(smaps), 256<<10)
	if err != nil || got != 20000 {
		t.Fatalf("got %d, %v; want the 256 MiB anonymous mapping's 20000", got, err)
	}
	if _, err := guestRAMResidentKiB(strings.NewReader(smaps), 1<<20); err == nil {
		t.Fatal("no error when nothing is big enough")
	}
}
