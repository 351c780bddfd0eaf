package userproc

import (
	"bytes"
	"debug/buildinfo"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tinyvmm/userproc/userproctest"
)

var testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

// withChild builds tinyvmm-usernet once and puts it on PATH.
func withChild(t testing.TB) { userproctest.WithChild(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	userproctest.Cleanup()
	os.Exit(code)
}

// BenchmarkStart is the user network's start as the VMM waits for it
// before the guest boots: from Start to the child's ready line.
func BenchmarkStart(b *testing.B) {
	withChild(b)
	for range b.N {
		be, err := Start(Config{MAC: testMAC}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		be.Close()
		b.StartTimer()
	}
}

// The child leaves gopacket out: its packet decoders' package init was
// three quarters of the child's, paid before every --net user guest could
// boot, for a debug dump in gvisor-tap-vsock's switch and link endpoint
// (pkg/tap, which its DHCP service imports too).
func TestChildLeavesOutGopacket(t *testing.T) {
	withChild(t)
	prog, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.Deps {
		if strings.Contains(m.Path, "gopacket") {
			t.Errorf("%s links %s", Program, m.Path)
		}
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// The child opens the hostfwd listeners before Start returns (port 0 is
// told back), takes the header size message, and Close leaves neither the
// process nor its listener behind.
func TestStartForwardsAndClose(t *testing.T) {
	withChild(t)
	b, err := Start(Config{MAC: testMAC, Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 80}}}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	fw := b.Forwards()
	if len(fw) != 1 || strings.HasSuffix(fw[0], ":0") {
		t.Fatalf("forwards %v", fw)
	}
	c, err := net.DialTimeout("tcp4", fw[0], 2*time.Second)
	if err != nil {
		t.Fatalf("dial the hostfwd: %v", err)
	}
	c.Close()
	if err := b.SetVnetHdrSize(10); err != nil {
		t.Fatal(err)
	}
	if err := b.SetVnetHdrSize(13); err == nil {
		t.Error("a 13-byte header was taken")
	}
	pid := b.Pid()
	if !alive(pid) {
		t.Fatal("child not running")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("child %d still there after Close", pid)
	}
	if c, err := net.DialTimeout("tcp4", fw[0], time.Second); err == nil {
		c.Close()
		t.Errorf("%s still listening after Close", fw[0])
	}
}

// Launch returns before the child is ready: the device's control
// messages go out at once, and Ready waits. A busy hostfwd port is then
// Ready's error, every time it is asked, with the child gone; Close
// after Launch alone leaves no child and no descriptor behind.
func TestLaunchThenReady(t *testing.T) {
	withChild(t)
	b, err := Launch(Config{MAC: testMAC, Forwards: []Forward{{Host: "127.0.0.1:0", GuestPort: 80}}}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.SetVnetHdrSize(10); err != nil {
		t.Fatalf("header size before the child is ready: %v", err)
	}
	if err := b.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(); err != nil || len(b.Forwards()) != 1 {
		t.Fatalf("Ready again: %v, forwards %v", err, b.Forwards())
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy, err := Launch(Config{MAC: testMAC, Forwards: []Forward{{Host: ln.Addr().String(), GuestPort: 80}}}, nil)
	if err != nil {
		t.Fatalf("Launch waited for the child: %v", err)
	}
	pid := busy.Pid()
	err = busy.Ready()
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Ready: %v, want the busy port", err)
	}
	if again := busy.Ready(); again != err {
		t.Errorf("Ready again: %v", again)
	}
	if alive(pid) {
		t.Errorf("child %d still there after Ready failed", pid)
	}

	fds := func() int { d, _ := os.ReadDir("/proc/self/fd"); return len(d) }
	before := fds()
	c, err := Launch(Config{MAC: testMAC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid = c.Pid()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("child %d still there after Close", pid)
	}
	if after := fds(); after != before {
		t.Errorf("%d descriptors open before Launch, %d after Close", before, after)
	}
}

// Ready's wait starts when it is called: a VMM that takes longer than
// readyTimeout to load its guest still finds the child's line.
func TestReadyAfterALongSetUp(t *testing.T) {
	withChild(t)
	old := readyTimeout
	readyTimeout = 2 * time.Second
	defer func() { readyTimeout = old }()
	b, err := Launch(Config{MAC: testMAC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	time.Sleep(readyTimeout + 500*time.Millisecond) // the set-up
	if err := b.Ready(); err != nil {
		t.Fatal(err)
	}
}

// A busy hostfwd port is one error line from Start (nothing else said),
// and no child is left (Start waited for it).
func TestStartBusyPort(t *testing.T) {
	withChild(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	logf := func(f string, a ...any) { t.Errorf("a failed start logged: "+f, a...) }
	_, err = Start(Config{MAC: testMAC, Forwards: []Forward{{Host: ln.Addr().String(), GuestPort: 80}}}, logf)
	if err == nil || !strings.Contains(err.Error(), "address already in use") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want one line saying the address is in use", err)
	}
}

// The child exits by itself when the device's end closes, as when the
// VMM dies without Close.
func TestChildExitsWhenLinkCloses(t *testing.T) {
	withChild(t)
	var mu sync.Mutex
	var logged []string
	b, err := Start(Config{MAC: testMAC}, func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, f)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(b.fd)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		t.Fatal("child still running 5 s after its link closed")
	}
	if b.waitErr != nil {
		t.Errorf("child exited with %v", b.waitErr)
	}
	mu.Lock()
	if len(logged) != 1 {
		t.Errorf("an early exit was logged %d times", len(logged))
	}
	mu.Unlock()
}

func TestNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Start(Config{MAC: testMAC}, nil)
	if err == nil || !strings.Contains(err.Error(), Program+" not found next to") {
		t.Fatalf("error %v", err)
	}
}

func TestArgsRoundTrip(t *testing.T) {
	c := Config{MAC: testMAC, MTU: 9000, Forwards: []Forward{{"127.0.0.1:8080", 80}, {"0.0.0.0:2222", 22}}, Restrict: true}
	got, err := ParseArgs(c.Args())
	if err != nil {
		t.Fatal(err)
	}
	if got.MAC.String() != c.MAC.String() || got.MTU != 9000 || len(got.Forwards) != 2 || got.Forwards[1] != c.Forwards[1] || !got.Restrict {
		t.Errorf("%+v, want %+v", got, c)
	}
	for _, bad := range [][]string{{"-mac", "x"}, {"-mac", testMAC.String(), "-fwd", "1.2.3.4:5"}, {"-mac", testMAC.String(), "extra"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

// Close is not news: the child it kills is never logged as exited. The
// goroutine that waits for the child sees both closing and ready closed by
// then; were it to pick between them at random (a select), about half of
// these closes would log a false "exited: signal: killed".
func TestCloseLogsNothing(t *testing.T) {
	withChild(t)
	const runs = 20
	for i := range runs {
		var mu sync.Mutex
		var logged []string
		b, err := Start(Config{MAC: testMAC}, func(f string, a ...any) {
			mu.Lock()
			logged = append(logged, fmt.Sprintf(f, a...))
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(logged) != 0 {
			t.Fatalf("close %d of %d logged %q", i+1, runs, logged)
		}
		mu.Unlock()
	}
}

// The child runs with no privilege it could use: no_new_privs, no
// capabilities, and, started as root, user and group nobody with no
// supplementary groups. It still carries a guest's connection to the
// host's loopback (the SYN below makes it dial the test's listener).
func TestChildRunsWithoutPrivilege(t *testing.T) {
	withChild(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b, err := Start(Config{MAC: testMAC}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(st), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	want := map[string]string{"NoNewPrivs": "1", "CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000"}
	if os.Geteuid() == 0 {
		want["CapBnd"] = "0000000000000000"
		want["Uid"] = "65534 65534 65534 65534"
		want["Gid"] = "65534 65534 65534 65534"
		want["Groups"] = ""
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("child's %s: %q, want %q", k, fields[k], v)
		}
	}

	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	msg := append(make([]byte, 12), synFrame(testMAC, port)...) // behind a 12-byte vnet header
	if err := syscall.Sendmsg(b.fd, msg, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the guest's SYN to the gateway did not reach the host's loopback: %v", err)
	}
	c.Close()
}

// synFrame is a TCP SYN from GuestIP:40000 to GatewayIP:port, broadcast
// (the gateway takes it), with valid checksums.
func synFrame(mac net.HardwareAddr, port uint16) []byte {
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:4], 40)
	copy(ip[12:16], net.ParseIP(GuestIP).To4())
	copy(ip[16:20], net.ParseIP(GatewayIP).To4())
	binary.BigEndian.PutUint16(ip[10:12], ^csum(0, ip))
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:2], 40000)
	binary.BigEndian.PutUint16(tcp[2:4], port)
	binary.BigEndian.PutUint32(tcp[4:8], 12345)
	tcp[12], tcp[13] = 5<<4, 0x02
	binary.BigEndian.PutUint16(tcp[14:16], 65535)
	pseudo := append(append([]byte{}, ip[12:20]...), 0, 6, 0, 20)
	binary.BigEndian.PutUint16(tcp[16:18], ^csum(csum(0, pseudo), tcp))
	f := append(bytes.Repeat([]byte{0xff}, 6), mac...)
	f = append(f, 0x08, 0x00)
	return append(append(f, ip...), tcp...)
}

// csum adds b to the ones'-complement sum s (b of even length).
func csum(s uint16, b []byte) uint16 {
	sum := uint32(s)
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// As root the link's send buffer goes past net.core.wmem_max.
func TestSendBufferPastWmemMax(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	if got := SetSendBuffer(fds[0], 4<<20); os.Geteuid() == 0 && got != 4<<20 {
		t.Errorf("as root the send buffer is %d, want 4 MiB past wmem_max", got)
	} else if got <= 0 {
		t.Errorf("send buffer %d", got)
	}
}

// exitIsNews: once Close has closed closing, never news, whatever else is
// closed; before it, news only after ready.
func TestExitIsNews(t *testing.T) {
	closed := func() chan struct{} { c := make(chan struct{}); close(c); return c }
	for range 1000 {
		if (&Backend{closing: closed(), ready: closed()}).exitIsNews() {
			t.Fatal("an exit after Close was news")
		}
	}
	if !(&Backend{closing: make(chan struct{}), ready: closed()}).exitIsNews() {
		t.Error("an exit while the guest runs was not news")
	}
	if (&Backend{closing: make(chan struct{}), ready: make(chan struct{})}).exitIsNews() {
		t.Error("an exit before ready (Start reports it) was news")
	}
}

// Every thread of the child, Go's sysmon among them, runs with
// ChildTimerSlack (TimerSlackEnv's value when set), and the VMM's threads
// keep their own.
func TestChildTimerSlack(t *testing.T) {
	withChild(t)
	if _, err := os.Stat("/proc/self/timerslack_ns"); err != nil {
		t.Skip("no timerslack_ns in /proc:", err)
	}
	// Start's thread is not this one: look at every thread of the test.
	own := func() string {
		var all []string
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			s, _ := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
			all = append(all, strings.TrimSpace(string(s)))
		}
		slices.Sort(all)
		return strings.Join(slices.Compact(all), " ")
	}
	before := own()
	for _, c := range []struct {
		env  string
		want int64
	}{{"", ChildTimerSlack.Nanoseconds()}, {"50", 50_000}} {
		t.Setenv(TimerSlackEnv, c.env)
		b, err := Start(Config{MAC: testMAC}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("/proc/%d/task", b.cmd.Process.Pid)
		tasks, err := os.ReadDir(dir)
		if err != nil || len(tasks) < 2 {
			b.Close()
			t.Fatalf("child's threads: %v, %v", tasks, err)
		}
		for _, task := range tasks {
			// A thread's own value is at /proc/TID (its task directory
			// has none).
			s, err := os.ReadFile(filepath.Join("/proc", task.Name(), "timerslack_ns"))
			if err != nil {
				t.Errorf("thread %s: %v", task.Name(), err)
				continue
			}
			if got := strings.TrimSpace(string(s)); got != fmt.Sprint(c.want) {
				t.Errorf("%s=%q: thread %s of the child has timer slack %s ns, want %d", TimerSlackEnv, c.env, task.Name(), got, c.want)
			}
		}
		b.Close()
	}
	if after := own(); after != before {
		t.Errorf("the test's thread's timer slack went from %s to %s", before, after)
	}
}

// The tests' build of the child is the program Find looks for.
func TestTestBuildIsTheProgram(t *testing.T) {
	if userproctest.Program != Program {
		t.Errorf("userproctest builds %q, Find looks for %q", userproctest.Program, Program)
	}
}
