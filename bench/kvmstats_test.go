package bench

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"tinyvmm/kvm"
)

// statsBlob builds a KVM binary stats file as Linux lays it out: header,
// id string, descriptors (16 bytes + nameSize each), data.
type fakeStat struct {
	name   string
	values []uint64
}

func statsBlob(nameSize int, stats []fakeStat) []byte {
	le := binary.LittleEndian
	const idOff = 24
	descOff := idOff + 64
	stride := 16 + nameSize
	dataOff := descOff + stride*len(stats)
	var data []byte
	desc := make([]byte, stride*len(stats))
	for i, s := range stats {
		d := desc[i*stride:]
		le.PutUint32(d[0:], 0)                     // flags: cumulative, no unit
		le.PutUint16(d[6:], uint16(len(s.values))) // size
		le.PutUint32(d[8:], uint32(len(data)))     // offset in data
		copy(d[16:16+nameSize], s.name)
		for _, v := range s.values {
			data = le.AppendUint64(data, v)
		}
	}
	h := make([]byte, idOff)
	le.PutUint32(h[4:], uint32(nameSize))
	le.PutUint32(h[8:], uint32(len(stats)))
	le.PutUint32(h[12:], idOff)
	le.PutUint32(h[16:], uint32(descOff))
	le.PutUint32(h[20:], uint32(dataOff))
	b := append(h, make([]byte, 64)...)
	copy(b[idOff:], "kvm-1234/vcpu_0")
	b = append(b, desc...)
	return append(b, data...)
}

func TestParseKVMStats(t *testing.T) {
	blob := statsBlob(48, []fakeStat{
		{"exits", []uint64{12345}},
		{"halt_wait_hist", make([]uint64, 32)}, // a histogram: skipped
		{"io_exits", []uint64{7}},
		{"irq_injections", []uint64{1 << 40}},
	})
	r := bytes.NewReader(blob)
	l, err := parseStatsLayout(r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.values(r)
	if err != nil {
		t.Fatal(err)
	}
	want := kvmCounts{"exits": 12345, "io_exits": 7, "irq_injections": 1 << 40}
	if len(c) != len(want) {
		t.Errorf("values %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d", k, c[k], v)
		}
	}
}

func TestParseKVMStatsRejectsBadHeaders(t *testing.T) {
	good := statsBlob(48, []fakeStat{{"exits", []uint64{1}}})
	for name, mangle := range map[string]func(b []byte) []byte{
		"truncated header":   func(b []byte) []byte { return b[:20] },
		"name size 0":        func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 0); return b },
		"huge name size":     func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 1<<20); return b },
		"too many descs":     func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 1<<30); return b },
		"descs past the end": func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 5); return b },
		"value far away": func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[24+64+8:], 1<<30)
			return b
		},
		"zero-sized value": func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[24+64+6:], 0)
			return b
		},
	} {
		b := mangle(bytes.Clone(good))
		if _, err := parseStatsLayout(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
	// A data block shorter than the descriptors say: values fails.
	r := bytes.NewReader(good[:len(good)-4])
	l, err := parseStatsLayout(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.values(r); err == nil {
		t.Error("short data block read without error")
	}
}

func TestKVMCountsSub(t *testing.T) {
	after := kvmCounts{"exits": 1500, "io_exits": 30, "new": 5}
	d, err := after.sub(kvmCounts{"exits": 500, "io_exits": 30})
	if err != nil {
		t.Fatal(err)
	}
	if d["exits"] != 1000 || d["io_exits"] != 0 || len(d) != 2 {
		t.Errorf("delta %v", d)
	}
	if _, err := (kvmCounts{"exits": 1}).sub(kvmCounts{"exits": 2}); err == nil {
		t.Error("a counter going backwards was accepted")
	}
}

func TestExitDetailPerFrame(t *testing.T) {
	d := kvmCounts{"exits": 3000, "io_exits": 10, "mmio_exits": 2, "irq_injections": 50, "halt_exits": 0, "pf_fixed": 9}
	m := exitDetail(d, 1000, 20)
	for k, want := range map[string]float64{
		"exits_per_frame": 3, "irqs_per_frame": 0.05, "kicks_per_frame": 0.02,
		"kvm_exits": 3000, "kvm_io_exits": 10, "kvm_mmio_exits": 2, "kvm_irq_injections": 50, "kvm_halt_exits": 0,
	} {
		got, ok := m[k]
		if !ok || math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if _, ok := m["kvm_pf_fixed"]; ok {
		t.Error("a counter outside kvmCounters was reported")
	}
	// No frames: the counts, no ratios.
	m = exitDetail(d, 0, 20)
	if _, ok := m["exits_per_frame"]; ok || m["kvm_exits"] != 3000 {
		t.Errorf("no frames: %v", m)
	}
	if _, ok := m["kicks_per_frame"]; ok {
		t.Errorf("no frames: kicks per frame %v", m)
	}
}

func TestScanFDs(t *testing.T) {
	dir := t.TempDir()
	for fd, target := range map[string]string{
		"0": "/dev/null", "3": "anon_inode:kvm-vm", "4": "anon_inode:kvm-vcpu:0",
		"9": "anon_inode:kvm-vcpu:1", "10": "anon_inode:[io_uring]", "11": "anon_inode:[io_uring]",
		"12": "anon_inode:[eventfd]", "notanfd": "anon_inode:kvm-vcpu:7",
	} {
		if err := os.Symlink(target, filepath.Join(dir, fd)); err != nil {
			t.Fatal(err)
		}
	}
	v, err := scanFDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.vcpus) != 2 || v.vcpus[0]+v.vcpus[1] != 13 || v.ioURings != 2 {
		t.Errorf("scan: %+v", v)
	}
	if _, err := scanFDs(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing dir scanned without error")
	}
	// Not a VMM: no vCPU, openVMStats says so.
	if _, err := openVMStats(os.Getpid()); err == nil || !strings.Contains(err.Error(), "no vCPU") {
		t.Errorf("openVMStats of the test process: %v", err)
	}
}

// TestMarkReaderFiresAtTheMarker: the callback runs once, as the marker's
// last byte is read, also when reads split it, and the stream is unchanged.
func TestMarkReaderFiresAtTheMarker(t *testing.T) {
	in := "BENCH ready mac=x\nnoise BENCH resu\nBENCH result mode=tx frames=9\nBENCH result again\n"
	src := &countReader{r: iotest.OneByteReader(strings.NewReader(in))}
	fired, at := 0, -1
	m := &markReader{r: src, marker: []byte("BENCH result"), at: func() { fired++; at = src.n }}
	out, err := io.ReadAll(m)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Index(in, "BENCH result") + len("BENCH result")
	if fired != 1 || at != want || string(out) != in {
		t.Errorf("fired %d times after byte %d (want once after %d); stream intact %v", fired, at, want, string(out) == in)
	}
}

type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestCellsCarryPerFrameCounts: medians over the runs that worked, in the
// JSON names the issue asks for, only where there were counts.
func TestCellsCarryPerFrameCounts(t *testing.T) {
	o := DefaultOptions()
	rep := newReport(o, kvm.Host{}, map[System]systemState{
		SysTinyvmm: {Label: "tinyvmm", Comparable: true}, SysCeiling: {Label: "ceiling", Comparable: true},
		SysQEMU: {Label: "QEMU (KVM)", Comparable: true}})
	e := experiment{Key: "tx64", Title: "guest->host pps, 64 B", Unit: "pps"}
	rep.plan([]experiment{e})
	for i, epf := range []float64{2, 8, 4} {
		rep.add(e, SysTinyvmm, Sample{Value: 1000, Detail: exitDetail(kvmCounts{"exits": uint64(epf * 1000), "irq_injections": 10}, 1000, float64(100*(i+1)))})
	}
	rep.add(e, SysTinyvmm, Sample{Err: "failed", Detail: map[string]float64{"exits_per_frame": 100}})
	rep.add(e, SysQEMU, Sample{Value: 900, Detail: exitDetail(kvmCounts{"exits": 9000, "irq_injections": 0}, 1000, 3)})
	rep.add(e, SysCeiling, Sample{Value: 5000, Detail: map[string]float64{"sent": 1}})
	rep.finish(0)
	tv := rep.cell("tx64", SysTinyvmm)
	if tv.ExitsPerFrame == nil || *tv.ExitsPerFrame != 4 || *tv.KicksPerFrame != 0.2 || *tv.IRQsPerFrame != 0.01 {
		t.Errorf("tinyvmm cell: %+v", tv)
	}
	q := rep.cell("tx64", SysQEMU)
	if q.ExitsPerFrame == nil || *q.ExitsPerFrame != 9 || *q.IRQsPerFrame != 0 {
		t.Errorf("QEMU cell: %+v", q)
	}
	if c := rep.cell("tx64", SysCeiling); c.ExitsPerFrame != nil {
		t.Errorf("ceiling has exits: %v", *c.ExitsPerFrame)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"exits_per_frame":4`, `"kicks_per_frame":0.2`, `"irqs_per_frame":0`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	var out bytes.Buffer
	rep.printPerFrame(&out)
	if !strings.Contains(out.String(), "4.000") || !strings.Contains(out.String(), "9.000") || !strings.Contains(out.String(), "0.200") {
		t.Errorf("per-frame table:\n%s", out.String())
	}
}
