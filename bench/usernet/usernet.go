// Package usernetbench is `tinyvmm-lab bench usernet`: tinyvmm's --net user
// (tinyvmm-usernet, a gVisor stack in a process of its own) against QEMU's
// -netdev user (libslirp), the same guest kernel and initramfs on an
// ordinary virtio-net-pci NIC in each, booted alternately, RUNS times.
//
// In each boot the guest runs four cells (or those --cells names) against
// servers the benchmark runs on the host's 127.0.0.1, reached through the
// gateway 10.0.2.2 (the host's loopback for both):
//   - g2h: `dd | nc` sends SIZE MiB; the host times it from the first
//     byte to the end of data;
//   - h2g: `wget` fetches SIZE MiB over HTTP; the host times it from the
//     request to the guest's next request, which comes once the whole
//     body has arrived;
//   - rr: RR connections, each a `wget` of a short page: connect, request,
//     response, close; timed by the host from the first to the last;
//   - dns: DNS lookups with `nslookup` of the gateway (dnsLookup), which
//     passes them to the host's 127.0.0.1:53, where the benchmark answers
//     (tinyvmm's: to the host's resolver, which without /etc/resolv.conf
//     is 127.0.0.1:53); timed from the first to the last.
//
// Each cell is reported as a median and as tinyvmm/QEMU. The same bulk
// transfer from a Go client on the host's loopback is the ceiling.
// Everything runs in a network namespace the benchmark creates (root),
// whose loopback is its only network: nothing leaves through either NAT.
package usernetbench

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"tinyvmm/bench/tinyvmmbin"
	"tinyvmm/internal/cliflag"
	"tinyvmm/internal/scratchns"
	"tinyvmm/internal/stats"
	"tinyvmm/userproc"
)

// Transfer is one timed connection.
type Transfer struct {
	Bytes   int64
	Elapsed time.Duration // first byte to end of data
}

// MiBs is the transfer's rate in MiB/s.
func (t Transfer) MiBs() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Bytes) / (1 << 20) / t.Elapsed.Seconds()
}

// cellInfo names a cell: its key (--cells, the JSON), its name and unit in
// the report.
type cellInfo struct{ key, name, unit string }

// The cells, in the order the guest runs them.
var cells = []cellInfo{
	{"g2h", "guest -> host TCP", "MiB/s"},
	{"h2g", "host -> guest TCP (wget)", "MiB/s"},
	{"rr", "connect+GET+close", "/s"},
	{"dns", "DNS lookups", "/s"},
}

// DNSName is what the guest looks up; the benchmark's DNS server answers
// it.
const DNSName = "bench.usernet.test."

// Options are bench usernet's flags.
type Options struct {
	SizeMiB, Runs, RR, DNS int
	Cells                  []string // the keys of the cells to run, in cells' order
	Systems                []string
	Net, RunArgs           string
	QEMU, Kernel, Initrd   string
	QEMUPreload, QEMUAccel string
	QEMUPcap               string // capture QEMU's NIC's frames to this file (filter-dump)
	Passt                  string // passt's binary, for the qemu-passt system
	Profile                string // tinyvmm-usernet's CPU profile, last tinyvmm boot
	JSON                   string
	ShowConsole            int           // lines of each boot's console to show
	Sched                  bool          // each cell's context switches and CPU time per thread group
	GuestStats             bool          // the guest's interrupts and TCP counters around g2h
	CellGap                int           // seconds the guest sleeps before each cell after the first
	TraceServer            string        // note the web server's connections' calls in this file
	BootTimeout            time.Duration // one boot's bound
}

// MainUsernet runs the benchmark.
func MainUsernet(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench usernet", flag.ContinueOnError)
	var o Options
	fs.IntVar(&o.SizeMiB, "size", 16, "`MiB` per bulk transfer (g2h and h2g)")
	fs.IntVar(&o.Runs, "runs", 5, "boots of each system, alternating (medians are reported)")
	fs.IntVar(&o.RR, "rr", 50, "connect+GET+close round trips per boot")
	fs.IntVar(&o.DNS, "dns", 50, "DNS lookups per boot")
	cellList := fs.String("cells", "g2h,h2g,rr,dns", "the `cells` each boot runs, in this order whatever the list's (e.g. h2g alone: whether a cell depends on what ran before it)")
	systems := fs.String("systems", "tinyvmm,qemu", "`LIST` of tinyvmm, qemu (QEMU's -netdev user) and qemu-passt (QEMU's -netdev stream to passt); tinyvmm:VAR=VALUE is tinyvmm with VAR in its environment (e.g. "+userproc.TxSingleEnv+"=1), tinyvmm:--FLAG=VALUE tinyvmm run with one more flag (e.g. --poll-us=0)")
	fs.StringVar(&o.Net, "net", "user", "the --net of tinyvmm's guest (e.g. user,mtu=9000)")
	fs.StringVar(&o.RunArgs, "run-args", "", "extra `ARGS` for tinyvmm run, space-separated (e.g. --mem 512M)")
	fs.StringVar(&o.QEMU, "qemu", "qemu-system-x86_64", "QEMU's `binary`")
	fs.StringVar(&o.QEMUAccel, "qemu-accel", "kvm", "QEMU's -accel (tcg where there is no /dev/kvm)")
	fs.StringVar(&o.QEMUPcap, "qemu-pcap", "", "capture the frames of QEMU's NIC in each boot to `FILE` (its -object filter-dump; the last boot's stays), as tinyvmm's --net user,pcap=FILE does for its own")
	fs.StringVar(&o.QEMUPreload, "qemu-preload", "", "LD_PRELOAD `FILE` into QEMU (in the nested L1: no-io-uring.so, as bench e2e)")
	fs.StringVar(&o.Passt, "passt", "passt", "passt's `binary`, for the system qemu-passt (QEMU's -netdev stream to passt, as libvirt and podman run it)")
	fs.StringVar(&o.Kernel, "kernel", "out/guest/bzImage", "the guest `kernel` (both systems)")
	fs.StringVar(&o.Initrd, "initrd", "out/guest/initramfs.cpio", "the guest `initramfs` (both systems)")
	fs.StringVar(&o.Profile, "cpuprofile", "", "write tinyvmm-usernet's CPU profile of the last boot of each tinyvmm system (the Kth in --systems) to `PREFIX`-K.N, one file per cell (with --sched; else per 2 s), and its GC counters at each file's start to PREFIX-K.gc")
	fs.StringVar(&o.JSON, "json", "", "write every run's numbers to `FILE`")
	fs.DurationVar(&o.BootTimeout, "boot-timeout", 5*time.Minute, "bound on one boot, all its cells")
	fs.BoolVar(&o.Sched, "sched", false, "show each cell's context switches and CPU time per thread group of the system under test (and of the benchmark's servers), from /proc, per unit of work")
	fs.BoolVar(&o.GuestStats, "guest-stats", false, "have the guest print its interrupt counts and TCP counters (segments, autocorking) before and after g2h (see them with --show-console)")
	fs.IntVar(&o.CellGap, "cell-gap", 0, "the guest sleeps `N` seconds before each cell after the first, so that what a cell left behind (a gateway still forwarding, its garbage) is done before the next one starts")
	fs.StringVar(&o.TraceServer, "trace-server", "", "note when the web server (h2g, rr) accepts, reads, writes and closes each connection, one line each, in `FILE` (to line up with tinyvmm-usernet's trace, "+userproc.TraceEnv+")")
	fs.IntVar(&o.ShowConsole, "show-console", 0, "show the last `N` lines of each boot's console (with --run-args --stats: tinyvmm's device counters)")
	if help, err := cliflag.ParseFlagsOnly(fs, "bench usernet", "Usage: tinyvmm-lab bench usernet [flags]   --net user vs QEMU's -netdev user: bulk TCP both ways, round trips, DNS", args, stdout); help || err != nil {
		return err
	}
	if o.SizeMiB < 1 || o.Runs < 1 || o.RR < 2 || o.DNS < 2 {
		return cliflag.Usagef("--size and --runs must be at least 1, --rr and --dns at least 2")
	}
	if !strings.HasPrefix(o.Net, "user") {
		return cliflag.Usagef("--net %q: this benchmark is for a user network (user[,...])", o.Net)
	}
	var err error
	if o.Cells, err = parseCells(*cellList); err != nil {
		return err
	}
	for _, s := range strings.Split(*systems, ",") {
		env, hasEnv := strings.CutPrefix(s, "tinyvmm:")
		if hasEnv && !strings.Contains(env, "=") || !hasEnv && s != "tinyvmm" && s != "qemu" && s != "qemu-passt" {
			return cliflag.Usagef("--systems: unknown system %q (tinyvmm, qemu, qemu-passt)", s)
		}
		o.Systems = append(o.Systems, s)
	}
	if why := scratchns.Usable(); why != "" {
		return fmt.Errorf("bench usernet %s (it runs in a network namespace of its own)", why)
	}
	if ns := outsideNameserver(); ns != "" {
		fmt.Fprintf(stderr, "bench usernet: /etc/resolv.conf names %s, outside the namespace: the DNS cell is left out (both gateways ask the host's resolver, 127.0.0.1:53 only without resolv.conf)\n", ns)
		o.Cells = slices.DeleteFunc(o.Cells, func(c string) bool { return c == "dns" })
		if len(o.Cells) == 0 {
			return errors.New("bench usernet: no cell to run")
		}
	}
	isQEMU := func(s string) bool { return s == "qemu" || s == "qemu-passt" }
	if slices.ContainsFunc(o.Systems, isQEMU) {
		if _, err := exec.LookPath(o.QEMU); err != nil {
			fmt.Fprintf(stderr, "bench usernet: no %s: QEMU's columns are left out\n", o.QEMU)
			o.Systems = slices.DeleteFunc(o.Systems, isQEMU)
		}
	}
	if slices.Contains(o.Systems, "qemu-passt") {
		if _, err := exec.LookPath(o.Passt); err != nil {
			fmt.Fprintf(stderr, "bench usernet: no %s (apt-get install passt): qemu-passt's column is left out\n", o.Passt)
			o.Systems = slices.DeleteFunc(o.Systems, func(s string) bool { return s == "qemu-passt" })
		}
	}
	if len(o.Systems) == 0 {
		return errors.New("bench usernet: no system to run")
	}
	return run(o, stdout, stderr)
}

// host is the benchmark's servers on the namespace's 127.0.0.1.
type host struct {
	sink       net.Listener // g2h
	web        net.Listener // h2g and rr
	size       int64
	mu         sync.Mutex
	h2gStart   time.Time
	h2gEnd     time.Time
	rrTimes    []time.Time
	dnsTimes   []time.Time
	dnsConn    net.PacketConn
	g2h        chan Transfer
	stopAccept chan struct{}
}

func (h *host) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.h2gStart, h.h2gEnd, h.rrTimes, h.dnsTimes = time.Time{}, time.Time{}, nil, nil
}

func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	switch r.URL.Path {
	case "/bulk":
		h.mu.Lock()
		h.h2gStart = now
		h.mu.Unlock()
		w.Header().Set("Content-Length", fmt.Sprint(h.size))
		buf := make([]byte, 256<<10)
		for left := h.size; left > 0; left -= int64(len(buf)) {
			if _, err := w.Write(buf[:min(left, int64(len(buf)))]); err != nil {
				return
			}
		}
	case "/h2gdone":
		h.mu.Lock()
		h.h2gEnd = now
		h.mu.Unlock()
	case "/rr":
		h.mu.Lock()
		h.rrTimes = append(h.rrTimes, now)
		h.mu.Unlock()
		io.WriteString(w, "ok\n")
	default:
		http.NotFound(w, r)
	}
}

// serveDNS answers DNSName's A query with a TEST-NET address, every
// other name with NXDOMAIN, and notes when each A query for DNSName came.
func (h *host) serveDNS(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply := h.answer(buf[:n]); reply != nil {
			pc.WriteTo(reply, from)
		}
	}
}

func (h *host) answer(query []byte) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(query)
	if err != nil || hdr.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	rh := dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true, RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true}
	ours := strings.EqualFold(q.Name.String(), DNSName)
	if !ours {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.StartQuestions()
	b.Question(q)
	if ours && q.Type == dnsmessage.TypeA {
		h.mu.Lock()
		h.dnsTimes = append(h.dnsTimes, time.Now())
		h.mu.Unlock()
		b.StartAnswers()
		b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}, dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// Result is one boot's cells (0 where a cell did not finish).
type Result struct {
	System string
	Run    int
	Cells  map[string]float64
	Error  string `json:",omitempty"`
}

func run(o Options, stdout, stderr io.Writer) error {
	ns, err := scratchns.New("tvbu")
	if err != nil {
		return err
	}
	defer ns.Close()
	bytes := int64(o.SizeMiB) << 20

	ceiling, err := loopbackCeiling(ns, bytes, 3)
	if err != nil {
		return fmt.Errorf("host loopback: %v", err)
	}

	if slices.Contains(o.Systems, "qemu-passt") {
		if err := passtUplink(ns); err != nil {
			return fmt.Errorf("qemu-passt's interface: %v", err)
		}
	}

	h := &host{size: bytes, g2h: make(chan Transfer, 1)}
	if err := ns.Do(func() (err error) {
		if h.sink, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		if h.web, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		if h.dnsConn, err = net.ListenPacket("udp4", "127.0.0.1:53"); err != nil {
			return fmt.Errorf("the DNS cell's server: %v", err)
		}
		return nil
	}); err != nil {
		return err
	}
	defer h.sink.Close()
	go h.serveDNS(h.dnsConn)
	defer h.dnsConn.Close()
	srv := &http.Server{Handler: h}
	web := h.web
	if o.TraceServer != "" {
		t, err := newServerTrace(o.TraceServer)
		if err != nil {
			return err
		}
		defer t.close()
		web = tracedListener{Listener: h.web, t: t}
	}
	go srv.Serve(web)
	defer srv.Close()
	go func() {
		for {
			tr := receive(h.sink, 1)
			if len(tr) == 0 {
				close(h.g2h)
				return
			}
			h.g2h <- tr[0]
		}
	}()

	script := GuestScript(o.Cells, o.SizeMiB, o.RR, o.DNS, port(h.sink), port(h.web))
	if o.GuestStats {
		script = withGuestStats(script)
	}
	if o.CellGap > 0 {
		script = withCellGap(script, o.CellGap)
	}
	if o.Sched {
		script = withSchedEnd(script)
	}
	if dir := filepath.Dir(o.Profile); o.Profile != "" && !exists(dir) {
		// The child writes PREFIX.N; a directory of their own can be
		// fetched whole (tar) from L1. Made here, it is writable by all:
		// the child drops its privileges after the first file.
		if err := os.MkdirAll(dir, 0o755); err == nil {
			os.Chmod(dir, 0o1777)
		}
	}
	var results []Result
	for r := 0; r < o.Runs; r++ {
		order := o.Systems
		if r%2 == 1 { // alternate who goes first
			order = slices.Clone(o.Systems)
			slices.Reverse(order)
		}
		for _, sys := range order {
			h.reset()
			drain(h.g2h)
			profile := ""
			if strings.HasPrefix(sys, "tinyvmm") && o.Profile != "" && r == o.Runs-1 {
				profile = fmt.Sprintf("%s-%d", o.Profile, slices.Index(o.Systems, sys))
			}
			var watch *schedWatch
			if o.Sched {
				watch = &schedWatch{signalChild: profile != ""}
			}
			console, err := boot(ns, o, sys, script, profile, watch)
			if watch != nil {
				watch.close()
			}
			res := Result{System: sys, Run: r + 1, Cells: map[string]float64{}}
			collect(h, bytes, o, &res)
			if err != nil || len(res.Cells) < len(o.Cells) {
				res.Error = fmt.Sprintf("%v; %d of %d cells; console:\n%s", err, len(res.Cells), len(o.Cells), tail(console, 15))
				fmt.Fprintf(stderr, "bench usernet: %s run %d: %s\n", sys, r+1, res.Error)
			}
			fmt.Fprintf(stderr, "bench usernet: %s run %d: %s\n", sys, r+1, cellLine(o.Cells, res.Cells))
			if o.ShowConsole > 0 {
				fmt.Fprintf(stderr, "%s\n", tail(console, o.ShowConsole))
			}
			if o.GuestStats {
				for _, line := range strings.Split(console, "\n") {
					if i := strings.Index(line, "gstat "); i >= 0 {
						fmt.Fprintf(stderr, "%s run %d: %s\n", sys, r+1, strings.TrimRight(line[i:], "\r"))
					}
				}
			}
			if watch != nil {
				watch.report(stderr, sys, r+1, map[string]float64{
					"g2h": float64(o.SizeMiB) * 1024, "h2g": float64(o.SizeMiB), "rr": float64(o.RR), "dns": float64(o.DNS)})
			}
			results = append(results, res)
		}
	}
	if o.JSON != "" {
		j, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(o.JSON, j, 0o644); err != nil {
			return err
		}
	}
	report(stdout, o, results, ceiling)
	return nil
}

// collect turns what the host's servers saw in one boot into cells.
func collect(h *host, bytes int64, o Options, res *Result) {
	select {
	case tr, ok := <-h.g2h:
		if ok && tr.Bytes == bytes {
			res.Cells["g2h"] = tr.MiBs()
		}
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.h2gStart.IsZero() && h.h2gEnd.After(h.h2gStart) {
		res.Cells["h2g"] = float64(bytes) / (1 << 20) / h.h2gEnd.Sub(h.h2gStart).Seconds()
	}
	if r := rate(h.rrTimes, o.RR); r > 0 {
		res.Cells["rr"] = r
	}
	if r := rate(h.dnsTimes, o.DNS); r > 0 {
		res.Cells["dns"] = r
	}
}

// rate is events per second from the first to the last of want events.
func rate(ts []time.Time, want int) float64 {
	if len(ts) < want || want < 2 {
		return 0
	}
	d := ts[want-1].Sub(ts[0])
	if d <= 0 {
		return 0
	}
	return float64(want-1) / d.Seconds()
}

func drain(c chan Transfer) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// GuestScript is what the guest runs: the cells named in want, in cells'
// order, stopping at the first failure.
func GuestScript(want []string, sizeMiB, rr, lookups, sinkPort, webPort int) string {
	gw := userproc.GatewayIP
	var lines []string
	for _, c := range cells {
		if !slices.Contains(want, c.key) {
			continue
		}
		lines = append(lines, "echo cell "+c.key)
		switch c.key {
		case "g2h":
			lines = append(lines, fmt.Sprintf("dd if=/dev/zero bs=1M count=%d 2>/dev/null | nc %s %d", sizeMiB, gw, sinkPort))
		case "h2g":
			lines = append(lines, fmt.Sprintf("wget -q -O /dev/null http://%s:%d/bulk", gw, webPort),
				fmt.Sprintf("wget -q -O /dev/null http://%s:%d/h2gdone", gw, webPort))
		case "rr":
			lines = append(lines, fmt.Sprintf("i=0; while [ $i -lt %d ]; do wget -q -O /dev/null http://%s:%d/rr || exit 1; i=$((i+1)); done", rr, gw, webPort))
		case "dns":
			lines = append(lines, fmt.Sprintf("i=0; while [ $i -lt %d ]; do %s >/dev/null || exit 1; i=$((i+1)); done", lookups, dnsLookup()))
		}
	}
	return strings.Join(append(lines, "echo BENCH-USERNET-DONE"), " && ")
}

// parseCells reads --cells: keys of cells, each once, at least one.
func parseCells(list string) ([]string, error) {
	var keys []string
	for _, k := range strings.Split(list, ",") {
		if !slices.ContainsFunc(cells, func(c cellInfo) bool { return c.key == k }) {
			return nil, cliflag.Usagef("--cells: unknown cell %q (g2h, h2g, rr, dns)", k)
		}
		if slices.Contains(keys, k) {
			return nil, cliflag.Usagef("--cells: %s twice", k)
		}
		keys = append(keys, k)
	}
	var ordered []string
	for _, c := range cells {
		if slices.Contains(keys, c.key) {
			ordered = append(ordered, c.key)
		}
	}
	return ordered, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// guestStatsCmd prints, on lines that start with "gstat", the guest's
// interrupt counts (virtio's and the local timer's) and its TCP counters.
const guestStatsCmd = "grep -E 'virtio|LOC' /proc/interrupts | sed 's/^/gstat /'; grep -E '^(Tcp|TcpExt):' /proc/net/snmp /proc/net/netstat | sed 's/^/gstat /'"

// withGuestStats has script print guestStatsCmd's counters before and
// after the g2h cell, whose one command is the one after "echo cell g2h"
// (nothing without that cell).
func withGuestStats(script string) string {
	parts := strings.Split(script, " && ")
	for i, p := range parts {
		if p == "echo cell g2h" && i+1 < len(parts) {
			parts[i+1] = "{ " + guestStatsCmd + "; } && " + parts[i+1] + " && { " + guestStatsCmd + "; }"
			break
		}
	}
	return strings.Join(parts, " && ")
}

// withCellGap has script sleep secs seconds before each cell but the
// first.
func withCellGap(script string, secs int) string {
	parts := strings.Split(script, " && ")
	var out []string
	first := true
	for _, p := range parts {
		if strings.HasPrefix(p, "echo cell ") {
			if !first {
				out = append(out, fmt.Sprintf("sleep %d", secs))
			}
			first = false
		}
		out = append(out, p)
	}
	return strings.Join(out, " && ")
}

// dnsLookup is the DNS cell's lookup: DNSName asked of the gateway,
// 10.0.2.2, named rather than taken from the guest's resolv.conf. That is
// where tinyvmm's DHCP points the guest, but QEMU's points it at 10.0.2.3,
// and libslirp (QEMU 7.2) forwards a query to 10.0.2.3 to the host's first
// resolver, or without one to 127.0.0.1:53 without ever passing the answer
// back; one to 10.0.2.2:53 it forwards to 127.0.0.1:53 and answers. So
// each gateway takes the lookup, asks 127.0.0.1:53, where the benchmark
// answers, and returns the answer.
func dnsLookup() string {
	return "nslookup " + DNSName + " " + userproc.GatewayIP
}

// outsideNameserver is the first nameserver in /etc/resolv.conf that is
// not on the loopback, "" if none (or no file): where the gateways would
// send the guest's lookups, out of the benchmark's reach.
func outsideNameserver() string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(f[1]); ip == nil || !ip.IsLoopback() {
				return f[1]
			}
		}
	}
	return ""
}

// boot runs one guest of sys to its end and returns its console.
// With watch, the console goes through it (schedWatch).
func boot(ns *scratchns.NS, o Options, sys, script, profile string, watch *schedWatch) (string, error) {
	var cmd *exec.Cmd
	var extra []*os.File                     // QEMU's fd 3 and on
	stopPasst := func() string { return "" } // qemu-passt's: its log
	var also []int                           // qemu-passt's passt, for watch
	switch {
	case strings.HasPrefix(sys, "tinyvmm"):
		vmm, err := tinyvmmbin.Path()
		if err != nil {
			return "", err
		}
		args := append([]string{"run", "--net", o.Net, "--timeout", o.BootTimeout.String()}, strings.Fields(o.RunArgs)...)
		variant, _ := strings.CutPrefix(sys, "tinyvmm:")
		if strings.HasPrefix(variant, "--") {
			args = append(args, variant)
		}
		args = append(args, "--", "sh", "-c", script)
		cmd = exec.Command(vmm, args...)
		cmd.Env = os.Environ()
		if variant != sys && !strings.HasPrefix(variant, "--") {
			cmd.Env = append(cmd.Env, variant)
		}
		if profile != "" {
			cmd.Env = append(cmd.Env, userproc.ProfileEnv+"="+profile)
		}
	case sys == "qemu" || sys == "qemu-passt":
		netdev := "user,id=n0"
		if sys == "qemu-passt" {
			qemuEnd, pid, stop, err := startPasst(ns, o.Passt)
			if err != nil {
				return "", err
			}
			also = []int{pid}
			defer qemuEnd.Close()
			defer stop()
			stopPasst = stop
			netdev = "stream,id=n0,server=off,addr.type=fd,addr.str=3"
			extra = []*os.File{qemuEnd}
		}
		argv, _ := json.Marshal([]string{"sh", "-c", script})
		cmdline := "console=ttyS0 reboot=k panic=-1 quiet tinyvmm.cmd=" + base64.RawURLEncoding.EncodeToString(argv)
		cpu := "host"
		if o.QEMUAccel != "kvm" {
			cpu = "max"
		}
		// q35 with its PIT: without one this Linux panics at boot
		// ("IO-APIC + timer doesn't work") under TCG.
		cmd = exec.Command(o.QEMU, "-accel", o.QEMUAccel, "-M", "q35", "-cpu", cpu, "-m", "256M", "-smp", "1",
			"-nodefaults", "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot",
			"-kernel", o.Kernel, "-initrd", o.Initrd, "-append", cmdline,
			"-netdev", netdev, "-device", "virtio-net-pci,netdev=n0",
			// The guest's init reports its status on tinyvmm's exit port
			// and then halts: this ends QEMU there.
			"-device", "isa-debug-exit,iobase=0x501,iosize=1")
		cmd.ExtraFiles = extra
		cmd.Args = append(cmd.Args, qemuPcapArgs(o.QEMUPcap)...)
		if o.QEMUPreload != "" {
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+o.QEMUPreload)
		}
	}
	var console interface {
		io.Writer
		String() string
	} = &strings.Builder{}
	if watch != nil {
		console = watch
	}
	cmd.Stdout, cmd.Stderr = console, console
	if err := ns.Do(cmd.Start); err != nil {
		return "", err
	}
	if watch != nil {
		watch.start(cmd.Process.Pid, also...)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(o.BootTimeout + 10*time.Second):
		cmd.Process.Kill()
		err = fmt.Errorf("timed out after %v", o.BootTimeout)
		<-done
	}
	out := console.String()
	if log := stopPasst(); !strings.Contains(out, "BENCH-USERNET-DONE") && log != "" {
		out += "\npasst: " + log
	}
	if !strings.Contains(out, "BENCH-USERNET-DONE") && err == nil {
		err = errors.New("the guest's script did not finish")
	}
	if strings.Contains(out, "BENCH-USERNET-DONE") && strings.HasPrefix(sys, "qemu") {
		err = nil // QEMU's exit status is the debug-exit's, or a poweroff's
	}
	return out, err
}

// startPasst starts passt in the namespace on one end of a stream
// socketpair and returns the other, for QEMU's -netdev stream (its fd 3),
// as libvirt connects them, and passt's PID. stop ends passt and returns
// what it wrote (once; later calls return the same).
func startPasst(ns *scratchns.NS, binary string) (qemuEnd *os.File, pid int, stop func() string, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, nil, err
	}
	qemuEnd, passtEnd := os.NewFile(uintptr(pair[0]), "qemu-end"), os.NewFile(uintptr(pair[1]), "passt-end")
	defer passtEnd.Close()
	var log strings.Builder
	cmd := exec.Command(binary, "--foreground", "--one-off", "--ipv4-only", "--quiet", "--runas", "65534:65534", "--fd", "3")
	cmd.ExtraFiles = []*os.File{passtEnd}
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := ns.Do(cmd.Start); err != nil {
		qemuEnd.Close()
		return nil, 0, nil, fmt.Errorf("passt: %v", err)
	}
	return qemuEnd, cmd.Process.Pid, sync.OnceValue(func() string {
		cmd.Process.Kill()
		cmd.Wait()
		return log.String()
	}), nil
}

// passtUplink gives the namespace what passt takes its guest's addresses
// from: an interface with a default route. It is a tap nobody reads, at
// the address QEMU's guest has behind -netdev user (10.0.2.15/24, the
// gateway 10.0.2.2, which passt maps to the host's loopback), so a
// frame routed to it goes nowhere.
func passtUplink(ns *scratchns.NS) error {
	if _, err := ns.AddTap("tvbpasst0", "10.0.2.15/24"); err != nil {
		return err
	}
	return ns.Do(func() error {
		link, err := netlink.LinkByName("tvbpasst0")
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.ParseIP(userproc.GatewayIP)})
	})
}

// qemuPcapArgs are QEMU's arguments that capture the frames of its NIC's
// netdev (n0) to file, none without one.
func qemuPcapArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{"-object", "filter-dump,id=pcap0,netdev=n0,file=" + file}
}

func report(w io.Writer, o Options, results []Result, ceiling []Transfer) {
	fmt.Fprintf(w, "tinyvmm bench usernet: %d MiB bulk, %d round trips, %d lookups; %d runs of %s, alternating (medians)\n",
		o.SizeMiB, o.RR, o.DNS, o.Runs, strings.Join(o.Systems, ", "))
	fmt.Fprintf(w, "%-34s", "")
	for _, s := range o.Systems {
		fmt.Fprintf(w, " %12s", s)
	}
	q := slices.Index(o.Systems, "qemu")
	if q >= 0 && len(o.Systems) > 1 {
		first := "tinyvmm" // its variants too
		if !strings.HasPrefix(o.Systems[0], "tinyvmm") {
			first = strings.TrimPrefix(o.Systems[0], "qemu-")
		}
		fmt.Fprintf(w, " %14s", first+"/qemu")
	}
	fmt.Fprintf(w, "   runs\n")
	for _, c := range cells {
		if !slices.Contains(o.Cells, c.key) {
			continue
		}
		fmt.Fprintf(w, "%-34s", c.name+" ("+c.unit+")")
		var meds []float64
		var all []string
		for _, s := range o.Systems {
			var v []float64
			for _, r := range results {
				if r.System == s {
					v = append(v, r.Cells[c.key])
				}
			}
			m := stats.UpperMedian(v)
			meds = append(meds, m)
			fmt.Fprintf(w, " %12.2f", m)
			all = append(all, s+" "+floats(v))
		}
		if q >= 0 && len(o.Systems) > 1 {
			if meds[q] > 0 {
				fmt.Fprintf(w, " %14.2f", meds[0]/meds[q])
			} else {
				fmt.Fprintf(w, " %14s", "-")
			}
		}
		fmt.Fprintf(w, "   %s\n", strings.Join(all, "; "))
	}
	fmt.Fprintf(w, "%-34s %12.2f   (the host's own loopback, Go client, MiB/s)\n", "ceiling: loopback bulk", median(ceiling))
}

func floats(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, " ")
}

func cellLine(keys []string, c map[string]float64) string {
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s %.2f", k, c[k]))
	}
	return strings.Join(s, ", ")
}

// receive accepts up to n connections one after another and times each
// from its first byte to its end of data.
func receive(ln net.Listener, n int) []Transfer {
	var out []Transfer
	buf := make([]byte, 256<<10)
	for len(out) < n {
		c, err := ln.Accept()
		if err != nil {
			return out
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Minute))
		var tr Transfer
		var first time.Time
		for {
			k, err := c.Read(buf)
			if k > 0 {
				if tr.Bytes == 0 {
					first = time.Now()
				}
				tr.Bytes += int64(k)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					tr.Elapsed = time.Since(first)
				}
				break
			}
		}
		c.Close()
		out = append(out, tr)
	}
	return out
}

// loopbackCeiling is the same transfer from a Go client on the host's
// loopback, inside ns: what the host side alone can take.
func loopbackCeiling(ns *scratchns.NS, bytes int64, runs int) ([]Transfer, error) {
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp4", "127.0.0.1:0"); return }); err != nil {
		return nil, err
	}
	defer ln.Close()
	got := make(chan []Transfer, 1)
	go func() { got <- receive(ln, runs) }()
	buf := make([]byte, 1<<20)
	for i := 0; i < runs; i++ {
		var c net.Conn
		if err := ns.Do(func() (err error) { c, err = net.Dial("tcp4", ln.Addr().String()); return }); err != nil {
			return nil, err
		}
		for sent := int64(0); sent < bytes; sent += int64(len(buf)) {
			if _, err := c.Write(buf[:min(int64(len(buf)), bytes-sent)]); err != nil {
				c.Close()
				return nil, err
			}
		}
		c.Close()
	}
	out := <-got
	if len(out) != runs {
		return nil, fmt.Errorf("%d of %d transfers arrived", len(out), runs)
	}
	return out, nil
}

func median(ts []Transfer) float64 {
	var r []float64
	for _, t := range ts {
		r = append(r, t.MiBs())
	}
	return stats.UpperMedian(r)
}

func rates(ts []Transfer) string {
	var s []string
	for _, t := range ts {
		s = append(s, fmt.Sprintf("%.1f", t.MiBs()))
	}
	return strings.Join(s, " ")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
