package usernetbench

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"tinyvmm/internal/cliflag"
)

// receive counts every byte of each connection and times it from the
// first byte to the end, one connection after another.
func TestReceiveTimesEachConnection(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []Transfer, 1)
	go func() { got <- receive(ln, 2) }()
	for _, n := range []int{3 << 20, 1000} {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // before the first byte: not timed
		io.Copy(c, io.LimitReader(zeros{}, int64(n)))
		c.Close()
	}
	ts := <-got
	if len(ts) != 2 || ts[0].Bytes != 3<<20 || ts[1].Bytes != 1000 {
		t.Fatalf("transfers %+v", ts)
	}
	if ts[0].Elapsed <= 0 || ts[0].Elapsed >= 300*time.Millisecond {
		t.Errorf("elapsed %v for 3 MiB: the wait before the first byte was counted?", ts[0].Elapsed)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestGuestScript(t *testing.T) {
	s := GuestScript(64, 3, 40000)
	for _, want := range []string{"-lt 3", "bs=1M count=64", "nc 10.0.2.2 40000 || exit 1"} {
		if !strings.Contains(s, want) {
			t.Errorf("script %q lacks %q", s, want)
		}
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{{"--size", "0"}, {"--runs", "0"}, {"--net", "tap=t0"}} {
		if err := MainUsernet(args, &out, &out); !cliflag.IsUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func TestMedian(t *testing.T) {
	ts := []Transfer{{1 << 20, time.Second}, {3 << 20, time.Second}, {2 << 20, time.Second}}
	if m := median(ts); m != 2 {
		t.Errorf("median %v", m)
	}
	if r := rates(ts); r != "1.0 3.0 2.0" {
		t.Errorf("rates %q", r)
	}
}

// -h and --help print the usage and the flags to stdout and are no error
// (the CLI exits 0), as for the other benchmarks.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		if err := MainUsernet([]string{arg}, &out, &errOut); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
		if s := out.String(); !strings.HasPrefix(s, "Usage: tinyvmm bench usernet") || !strings.Contains(s, "-runs") {
			t.Errorf("%s: stdout %q, want the usage and the flags", arg, s)
		}
		if errOut.Len() != 0 {
			t.Errorf("%s: stderr %q", arg, errOut.String())
		}
	}
}
