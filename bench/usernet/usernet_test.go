package usernetbench

import (
	"bytes"
	"golang.org/x/net/dns/dnsmessage"
	"io"
	"net"
	"os/exec"
	"slices"
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
	s := GuestScript(allCells, 64, 30, 40, 40000, 40001)
	for _, want := range []string{"bs=1M count=64 2>/dev/null | nc 10.0.2.2 40000 && ", "wget -q -O /dev/null http://10.0.2.2:40001/bulk && ",
		"-lt 30 ]; do wget -q -O /dev/null http://10.0.2.2:40001/rr || exit 1", "-lt 40 ]; do nslookup " + DNSName + " 10.0.2.2 >/dev/null", "&& echo BENCH-USERNET-DONE"} {
		if !strings.Contains(s, want) {
			t.Errorf("script %q lacks %q", s, want)
		}
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{{"--size", "0"}, {"--runs", "0"}, {"--net", "tap=t0"}, {"--rr", "1"}, {"--systems", "tinyvmm,vbox"}, {"--cells", "h2g,tx64"}} {
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

// The DNS cell's server answers DNSName's A query, counts it, and says
// NXDOMAIN to other names.
func TestDNSAnswer(t *testing.T) {
	h := &host{}
	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		as    int
	}{{DNSName, dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1}, {DNSName, dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 0}, {"other.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0}} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(tc.name), Type: tc.typ, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		var m dnsmessage.Message
		if err := m.Unpack(h.answer(q)); err != nil {
			t.Fatal(err)
		}
		if m.ID != 7 || m.RCode != tc.rcode || len(m.Answers) != tc.as {
			t.Errorf("%s %v: id %d rcode %v, %d answers", tc.name, tc.typ, m.ID, m.RCode, len(m.Answers))
		}
	}
	if len(h.dnsTimes) != 1 {
		t.Errorf("%d lookups counted, want 1", len(h.dnsTimes))
	}
	if r := rate([]time.Time{time.Unix(0, 0), time.Unix(1, 0), time.Unix(2, 0)}, 3); r != 1 {
		t.Errorf("rate %v, want 1/s", r)
	}
}

var allCells = []string{"g2h", "h2g", "rr", "dns"}

// Without the DNS cell the script leaves it out and still ends with the
// marker; h2g alone is its two fetches and nothing of the others.
func TestGuestScriptWithSomeCells(t *testing.T) {
	s := GuestScript([]string{"g2h", "h2g", "rr"}, 1, 2, 3, 1, 2)
	if strings.Contains(s, "nslookup") || strings.Contains(s, "cell dns") || !strings.HasSuffix(s, "&& echo BENCH-USERNET-DONE") {
		t.Errorf("script %q", s)
	}
	want := "echo cell h2g && wget -q -O /dev/null http://10.0.2.2:2/bulk && wget -q -O /dev/null http://10.0.2.2:2/h2gdone && echo BENCH-USERNET-DONE"
	if s := GuestScript([]string{"h2g"}, 1, 2, 3, 1, 2); s != want {
		t.Errorf("h2g alone: %q, want %q", s, want)
	}
}

// --cells takes known keys once each and puts them in the guest's order.
func TestParseCells(t *testing.T) {
	if got, err := parseCells("dns,h2g"); err != nil || !slices.Equal(got, []string{"h2g", "dns"}) {
		t.Errorf("dns,h2g: %q, %v", got, err)
	}
	for _, bad := range []string{"", "h2g,h2g", "tx64", "h2g,"} {
		if _, err := parseCells(bad); !cliflag.IsUsage(err) {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
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
		if s := out.String(); !strings.HasPrefix(s, "Usage: tinyvmm-lab bench usernet") || !strings.Contains(s, "--runs") {
			t.Errorf("%s: stdout %q, want the usage and the flags", arg, s)
		}
		if errOut.Len() != 0 {
			t.Errorf("%s: stderr %q", arg, errOut.String())
		}
	}
}

// --guest-stats wraps the g2h cell's one command in two dumps of the
// guest's counters, and leaves the other cells and the cell markers as
// they were; the script stays valid for a POSIX shell.
func TestGuestStatsScript(t *testing.T) {
	plain := GuestScript(allCells, 1, 2, 3, 4, 5)
	s := withGuestStats(plain)
	g2h := "dd if=/dev/zero bs=1M count=1 2>/dev/null | nc 10.0.2.2 4"
	want := "echo cell g2h && { " + guestStatsCmd + "; } && " + g2h + " && { " + guestStatsCmd + "; } && echo cell h2g"
	if !strings.Contains(s, want) {
		t.Fatalf("script %q lacks %q", s, want)
	}
	if strings.Count(s, guestStatsCmd) != 2 || strings.Replace(strings.Replace(s, "{ "+guestStatsCmd+"; } && ", "", 1), " && { "+guestStatsCmd+"; }", "", 1) != plain {
		t.Errorf("the stats changed more than the g2h cell: %q", s)
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("sh -n: %v: %s", err, out)
		}
	}
}

// --cell-gap puts a sleep before each cell but the first, and nothing
// else.
func TestCellGapScript(t *testing.T) {
	plain := GuestScript(allCells, 1, 2, 3, 4, 5)
	s := withCellGap(plain, 2)
	if n := strings.Count(s, "sleep 2 && echo cell "); n != 3 || strings.Contains(s, "sleep 2 && echo cell g2h") {
		t.Errorf("%d gaps, want 3, none before g2h: %q", n, s)
	}
	if strings.ReplaceAll(s, "sleep 2 && ", "") != plain {
		t.Errorf("the gaps changed more than themselves: %q", s)
	}
	if s := withCellGap(GuestScript([]string{"rr", "dns"}, 1, 2, 3, 4, 5), 2); !strings.HasPrefix(s, "echo cell rr") || strings.Count(s, "sleep 2 && echo cell dns") != 1 {
		t.Errorf("rr and dns: one gap, before dns: %q", s)
	}
}

func TestQEMUPcapArgs(t *testing.T) {
	if a := qemuPcapArgs(""); a != nil {
		t.Errorf("no file: %q", a)
	}
	want := []string{"-object", "filter-dump,id=pcap0,netdev=n0,file=/tmp/q.pcap"}
	if a := qemuPcapArgs("/tmp/q.pcap"); !slices.Equal(a, want) {
		t.Errorf("qemuPcapArgs = %q, want %q", a, want)
	}
}

// The report has a row per cell run and a ratio column named after the
// first system (tinyvmm for any of its variants).
func TestReportColumns(t *testing.T) {
	for _, tc := range []struct {
		systems []string
		ratio   string
	}{{[]string{"qemu-passt", "qemu"}, "passt/qemu"}, {[]string{"tinyvmm:--poll-us=0", "qemu"}, "tinyvmm/qemu"}} {
		o := Options{SizeMiB: 1, RR: 2, DNS: 2, Runs: 1, Cells: []string{"rr"}, Systems: tc.systems}
		res := []Result{{System: tc.systems[0], Run: 1, Cells: map[string]float64{"rr": 30}}, {System: "qemu", Run: 1, Cells: map[string]float64{"rr": 20}}}
		var out bytes.Buffer
		report(&out, o, res, nil)
		s := out.String()
		if !strings.Contains(strings.SplitN(s, "\n", 3)[1], tc.ratio) || !strings.Contains(s, "connect+GET+close") || strings.Contains(s, "guest -> host") || !strings.Contains(s, "1.50") {
			t.Errorf("%v: report %q, want a %s column of 1.50 and only rr's row", tc.systems, s, tc.ratio)
		}
	}
}
