package tour

import (
	"os"
	"strings"
	"testing"
)

// The run's data crosses a console: it survives other lines between its
// own and CRLF line ends, and a missing or short part is an error.
func TestDataRoundTrip(t *testing.T) {
	evs, _ := ParseTrace(strings.NewReader(pingTrace))
	want := Result{Events: evs, Stats: pingStats(), Ping: []string{"64 bytes from 10.0.2.1: seq=0 ttl=64 time=0.9 ms"}, Elapsed: 1500000000}
	var b strings.Builder
	if err := WriteData(&b, want); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("only %d data lines", len(lines))
	}
	for _, l := range lines {
		if len(l) > 80 {
			t.Errorf("a data line is %d columns", len(l))
		}
	}
	var d DataReader
	for i, l := range lines {
		if i == 1 {
			if d.Line("[   13.398320] kvm [60]: vcpu0, guest rIP: 0xffffffff") {
				t.Error("a kernel line taken as data")
			}
		}
		if !d.Line(l + "\r") {
			t.Errorf("line %d not taken as data: %q", i, l)
		}
	}
	got, err := d.Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != len(want.Events) || got.Events[2] != want.Events[2] || got.Elapsed != want.Elapsed ||
		got.Stats.IO != "uring" || got.Stats.Queues[1].Bytes != 98 || got.Ping[0] != want.Ping[0] {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	var short DataReader
	for _, l := range lines[1:] {
		short.Line(l)
	}
	if _, err := short.Result(); err == nil {
		t.Error("no error with the first data line missing")
	}
	var unended DataReader
	for _, l := range lines[:len(lines)-1] {
		unended.Line(l)
	}
	if _, err := unended.Result(); err == nil || unended.Done() {
		t.Error("no error without the end line")
	}
}

// testdata/ping.data is a run's data as the nested L1 hands it over (the
// canned ping of these tests): the CLI's test plays the lab command with
// it. It must stay what WriteData writes; TOUR_UPDATE=1 rewrites it.
func TestPingDataFile(t *testing.T) {
	evs, _ := ParseTrace(strings.NewReader(pingTrace))
	r := Result{Events: evs, Stats: pingStats(), Ping: []string{"64 bytes from 10.0.2.1: seq=0 ttl=64 time=0.9 ms"}, Elapsed: 1500000000}
	var b strings.Builder
	if err := WriteData(&b, r); err != nil {
		t.Fatal(err)
	}
	const file = "testdata/ping.data"
	if os.Getenv("TOUR_UPDATE") != "" {
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if raw, err := os.ReadFile(file); err != nil || string(raw) != b.String() {
		t.Errorf("%s is not what WriteData writes now (%v): TOUR_UPDATE=1 go test -run TestPingDataFile ./tour", file, err)
	}
}
