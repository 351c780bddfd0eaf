package virtionet

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"tinyvmm/ratelimit"
)

// readPcap returns the frames of a pcap file, checking its header.
func readPcap(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("pcap header: %v", err)
	}
	if pr.LinkType() != layers.LinkTypeEthernet || pr.Snaplen() != captureSnapLen {
		t.Errorf("link type %v snaplen %d, want Ethernet and %d", pr.LinkType(), pr.Snaplen(), captureSnapLen)
	}
	var frames [][]byte
	for {
		data, ci, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("pcap record %d: %v", len(frames), err)
		}
		if ci.Length != len(data) || ci.Timestamp.IsZero() {
			t.Errorf("record %d: %+v for %d bytes", len(frames), ci, len(data))
		}
		frames = append(frames, data)
	}
}

// captureTraffic sends tx frames (header and frame in separate buffers, the
// second one of them in three) and then delivers rx frames, one of them
// across two mergeable buffers; it returns the frames in the order they
// crossed, without vnet header.
func captureTraffic(t *testing.T, r *rig, ntx, nrx int) [][]byte {
	t.Helper()
	var want [][]byte
	for i := range ntx {
		f := r.txFrame(i, 60+100*i)
		parts := [][]byte{f[:r.hdrLen()], f[r.hdrLen():]}
		if i == 1 {
			parts = [][]byte{f[:r.hdrLen()], f[r.hdrLen() : r.hdrLen()+10], f[r.hdrLen()+10 : r.hdrLen()+50], f[r.hdrLen()+50:]}
		}
		if _, err := r.tx.AddChain(parts, nil); err != nil {
			t.Fatal(err)
		}
		want = append(want, f[r.hdrLen():])
	}
	r.tx.Kick()
	for range ntx {
		r.peerRead()
	}
	r.waitUsed(r.tx, ntx, nil)
	for i := range nrx {
		f := r.txFrame(100+i, 64+1500*i) // the second spans two 2 KiB buffers
		r.peerWrite(f)
		want = append(want, f[r.hdrLen():])
	}
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got < nrx && time.Now().Before(deadline) {
		got = int(r.stats(rxQueue).Frames)
		time.Sleep(time.Millisecond)
	}
	if got != nrx {
		t.Fatalf("%d rx frames delivered, want %d", got, nrx)
	}
	return want
}

// Every frame, both directions, lands in the capture whole and in order.
func testCaptureBothDirections(t *testing.T, io IOMode) {
	path := filepath.Join(t.TempDir(), "net.pcap")
	r := newRig(t, rigOptions{io: io, pcap: path})
	r.rx.AddRxBuffers(64, 2048)
	r.activate()
	r.rx.Kick()
	want := captureTraffic(t, r, 5, 3)
	if !strings.Contains(r.log.String(), "capturing every frame to "+path) {
		t.Errorf("no notice of the capture in %q", r.log.String())
	}
	if err := r.dev.Close(); err != nil {
		t.Fatal(err)
	}
	got := readPcap(t, path)
	if len(got) != len(want) {
		t.Fatalf("the capture has %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("captured frame %d: %d bytes %x..., want %d bytes %x...", i, len(got[i]), got[i][:8], len(want[i]), want[i][:8])
		}
	}
	rx, tx := r.stats(rxQueue), r.stats(txQueue)
	if tx.Captured != 5 || rx.Captured != 3 || tx.CaptureDrops+rx.CaptureDrops != 0 {
		t.Errorf("captured tx %d rx %d, not captured %d+%d; want 5, 3 and none", tx.Captured, rx.Captured, tx.CaptureDrops, rx.CaptureDrops)
	}
	if s := r.dev.Stats().String(); !strings.Contains(s, "captured 5 (0 not: writer behind)") {
		t.Errorf("--stats text lacks the capture counters:\n%s", s)
	}
}

// tshark, the reference reader, sees the frame count and the bytes the
// test sent.
func TestCaptureTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tshark is not installed (.ci/run installs it)")
		}
		t.Skip("tshark is not installed: apt-get install tshark")
	}
	path := filepath.Join(t.TempDir(), "net.pcap")
	r := newRig(t, rigOptions{pcap: path})
	r.rx.AddRxBuffers(64, 2048)
	r.activate()
	r.rx.Kick()
	want := captureTraffic(t, r, 6, 3)
	if err := r.dev.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", path, "-T", "fields", "-e", "frame.len").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lens := strings.Fields(string(out))
	if len(lens) != len(want) {
		t.Fatalf("tshark counts %d frames, want %d:\n%s", len(lens), len(want), out)
	}
	for i, l := range lens {
		if l != strconv.Itoa(len(want[i])) {
			t.Errorf("tshark: frame %d is %s bytes, want %d", i+1, l, len(want[i]))
		}
	}
	// One frame's bytes: the rx frame that spanned two guest buffers.
	const n = 8 // tshark numbers from 1: frame 8 is want[7]
	out, err = exec.Command(tshark, "-r", path, "-Y", "frame.number=="+strconv.Itoa(n), "-x").Output()
	if err != nil {
		t.Fatalf("tshark -x: %v", err)
	}
	got, err := parseHexDump(string(out), len(want[n-1]))
	if err != nil {
		t.Fatalf("tshark -x: %v\n%s", err, out)
	}
	if !bytes.Equal(got, want[n-1]) {
		t.Errorf("tshark shows frame %d as\n%x\nwant\n%x", n, got, want[n-1])
	}
}

// parseHexDump reads the first n bytes of tshark -x output: lines of a
// 4-digit hex offset, up to 16 hex bytes, then their ASCII.
func parseHexDump(out string, n int) ([]byte, error) {
	var b []byte
	for _, line := range strings.Split(out, "\n") {
		if len(b) >= n {
			break
		}
		off, rest, ok := strings.Cut(line, "  ")
		if !ok || len(off) != 4 {
			continue
		}
		if o, err := strconv.ParseUint(off, 16, 32); err != nil || int(o) != len(b) {
			continue
		}
		k := min(16, n-len(b))
		if len(rest) < 3*k-1 {
			return nil, errors.New("short hex line: " + line)
		}
		x, err := hex.DecodeString(strings.ReplaceAll(rest[:3*k-1], " ", ""))
		if err != nil {
			return nil, err
		}
		b = append(b, x...)
	}
	if len(b) != n {
		return nil, errors.New("hex dump has " + strconv.Itoa(len(b)) + " bytes")
	}
	return b, nil
}

// A writer that cannot keep up (the pcap is a FIFO nobody reads) costs
// frames in the capture, counted, and nothing in the datapath: every
// frame still reaches the backend. The frames that were captured are
// whole once the reader catches up.
func TestCaptureWriterBehindDropsNotStalls(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "net.pcap")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader := make(chan *os.File, 1)
	go func() { // opening a FIFO waits for the other end
		f, err := os.Open(fifo)
		if err != nil {
			t.Error(err)
		}
		reader <- f
	}()
	r := newRig(t, rigOptions{pcap: fifo, size: 256, txBufSize: 4096})
	rf := <-reader
	if rf == nil {
		t.FailNow()
	}
	defer rf.Close()
	r.activate()
	// ~12 MB: beyond the 4 MiB of blocks, the 1 MiB file buffer and the pipe.
	const n, size = 3000, 4000
	frame := r.txFrame(0, size)
	var read atomic.Int64 // frames the peer has read
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 8192)
		fds := []unix.PollFd{{Fd: int32(r.sp.Peer), Events: unix.POLLIN}}
		for read.Load() < n {
			k, err := unix.Poll(fds, 2000)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if k <= 0 {
				return
			}
			if k, err := unix.Read(r.sp.Peer, buf); err == nil && k == len(frame) {
				read.Add(1)
			}
		}
	}()
	// At most 12 frames ahead of the peer, so the socket never refuses one.
	start, sent := time.Now(), 0
	for sent < n && time.Since(start) < 20*time.Second {
		r.tx.Used()
		for sent < n && sent-int(read.Load()) < 12 {
			if _, err := r.tx.AddChain([][]byte{frame}, nil); err != nil {
				break
			}
			sent++
		}
		r.tx.Kick()
		time.Sleep(100 * time.Microsecond)
	}
	<-done
	if got := read.Load(); got != n {
		t.Fatalf("the backend got %d of %d frames while the capture was stuck; %s", got, n, r.dev.Stats())
	}
	// The peer may have the last frame before the worker has counted it.
	waitFor(t, "every frame counted", func() bool { s := r.stats(txQueue); return s.Captured+s.CaptureDrops >= n })
	s := r.stats(txQueue)
	if s.Captured+s.CaptureDrops != n || s.CaptureDrops == 0 {
		t.Fatalf("captured %d, not captured %d; want %d in all, some not", s.Captured, s.CaptureDrops, n)
	}
	// Now read the FIFO to its end while the device closes.
	file := filepath.Join(filepath.Dir(fifo), "copy.pcap")
	copied := make(chan error, 1)
	go func() {
		out, err := os.Create(file)
		if err == nil {
			_, err = io.Copy(out, rf)
			out.Close()
		}
		copied <- err
	}()
	if err := r.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	frames := readPcap(t, file)
	if uint64(len(frames)) != s.Captured {
		t.Fatalf("the capture has %d frames, the counter says %d", len(frames), s.Captured)
	}
	for i, f := range frames {
		if !bytes.Equal(f, frame[r.hdrLen():]) {
			t.Fatalf("captured frame %d differs", i)
		}
	}
	t.Logf("%d frames: %d captured, %d not (writer behind)", n, s.Captured, s.CaptureDrops)
}

// With capture off nothing is opened and the datapath never looks at it
// beyond a nil check (the hooks are in frameDone and rxFrameDone).
func TestCaptureOffOpensNothing(t *testing.T) {
	r := newRig(t, rigOptions{})
	if r.dev.capture != nil || r.dev.limits != [2]*ratelimit.Limiter{} {
		t.Fatal("capture or limiter set up without being asked for")
	}
	r.activate()
	r.tx.AddChain([][]byte{r.txFrame(0, 60)}, nil)
	r.tx.Kick()
	r.peerRead()
	if s := r.stats(txQueue); s.Captured != 0 || s.CaptureDrops != 0 {
		t.Errorf("tx stats %+v", s)
	}
}
