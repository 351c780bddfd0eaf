package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"tinyvmm/kvm"
)

// fakeDebugfs lays out KVM's debugfs directory for VMs as Linux does:
// one directory PID-FD per VM, one file per counter, the value and a newline.
func fakeDebugfs(t *testing.T, vms map[string]map[string]string) string {
	root := t.TempDir()
	for vm, files := range vms {
		dir := filepath.Join(root, vm)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, val := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// fakeProc makes /proc/PID/task/TID and /proc/PID/fd/N links.
func fakeProc(t *testing.T, procs map[int]struct {
	tids []int
	fds  map[int]string
}) string {
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		for _, tid := range p.tids {
			if err := os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(tid)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(filepath.Join(dir, "fd"), 0o755)
		for fd, target := range p.fds {
			if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(fd))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// TestReadKVMDebugfs: the VM's directory is named after the thread that
// made it (not the process) and the VM's fd.
func TestReadKVMDebugfs(t *testing.T) {
	root := fakeDebugfs(t, map[string]map[string]string{
		"1240-11": {"exits": "12345\n", "io_exits": "7\n", "irq_injections": "1099511627776\n", "halt_exits": "0\n",
			"pf_fixed": "9\n", "halt_wait_hist": "1 2 3\n"},
		"1234-12": {"exits": "1\n"},                           // the process id with another fd
		"50-11":   {"exits": "1\n"},                           // another process, same fd
		"77-3":    {"exits": "1\n"}, "77-4": {"exits": "2\n"}, // two VMs in one process
		"88-3": {"io_exits": "1\n"}, // no exits
		"99-3": {"exits": "many\n"},
	})
	type p = struct {
		tids []int
		fds  map[int]string
	}
	vm := "anon_inode:kvm-vm"
	proc := fakeProc(t, map[int]p{
		1234: {[]int{1234, 1235, 1240}, map[int]string{3: "/dev/kvm", 11: vm, 12: "anon_inode:kvm-vcpu:0", 13: "anon_inode:[io_uring]"}},
		50:   {[]int{50}, map[int]string{7: vm}},
		77:   {[]int{77}, map[int]string{3: vm, 4: vm}},
		88:   {[]int{88}, map[int]string{3: vm}},
		99:   {[]int{99}, map[int]string{3: vm}},
	})
	s, err := openVMStats(root, proc, 1234)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := kvmCounts{"exits": 12345, "io_exits": 7, "irq_injections": 1 << 40, "halt_exits": 0}
	if len(c) != len(want) {
		t.Errorf("counts %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d", k, c[k], v)
		}
	}
	for pid, why := range map[int]string{77: "has 2 VMs", 50: "has 0 VMs", 5: "no such file"} {
		if _, err := openVMStats(root, proc, pid); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("pid %d: %v, want %q", pid, err, why)
		}
	}
	for _, pid := range []int{88, 99} {
		s, err := openVMStats(root, proc, pid)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := s.Read(); err == nil {
			t.Errorf("pid %d read %v without error", pid, c)
		}
	}
	if _, err := openVMStats(filepath.Join(root, "none"), proc, 1234); err == nil || !strings.Contains(err.Error(), "DEBUG_FS") {
		t.Errorf("no debugfs: %v", err)
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
	d := kvmCounts{"exits": 3010, "io_exits": 10, "mmio_exits": 2, "irq_injections": 50, "halt_exits": 0, "pf_fixed": 9}
	m := exitDetail(d, 1000, 20)
	for k, want := range map[string]float64{
		// The console's port exits are not the datapath's.
		"exits_per_frame": 3, "irqs_per_frame": 0.05, "kicks_per_frame": 0.02,
		"kvm_exits": 3010, "kvm_io_exits": 10, "kvm_mmio_exits": 2, "kvm_irq_injections": 50, "kvm_halt_exits": 0,
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
	if _, ok := m["exits_per_frame"]; ok || m["kvm_exits"] != 3010 {
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
	if len(v.vcpus) != 2 || v.vcpus[0]+v.vcpus[1] != 13 || v.ioURings != 2 || len(v.vms) != 1 || v.vms[0] != 3 {
		t.Errorf("scan: %+v", v)
	}
	if _, err := scanFDs(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing dir scanned without error")
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

// TestHostCPUPerFrame: the VMM's CPU outside the guest over the window,
// per frame the guest moved, from the exact time (not the ticks); none
// without frames.
func TestHostCPUPerFrame(t *testing.T) {
	run := &GuestRun{KVM: kvmCounts{"exits": 300}, IOURings: -1, Switches: map[string]uint64{"vmm_host_cpu_ms": 1000, "vmm_host_cpu_us": 900_000,
		"vmm_host_cpu_us:net-tap0": 600_000, "vmm_runq_wait_us:net-tap0": 20_000}}
	s := Sample{Detail: map[string]float64{}}
	addExits(&s, run, 200_000, 3)
	if got := s.Detail["host_cpu_us_per_frame"]; got != 4.5 {
		t.Errorf("host CPU per frame %v us, want 4.5 (900 ms over 200,000 frames)", got)
	}
	// And by thread, as the Linux guest's cells have it.
	if got, wait := s.Detail["host_cpu_us_per_frame:net-tap0"], s.Detail["runq_wait_us_per_frame:net-tap0"]; got != 3 || wait != 0.1 {
		t.Errorf("the worker's CPU and wait per frame %v, %v us, want 3 and 0.1", got, wait)
	}
	s = Sample{Detail: map[string]float64{}}
	addExits(&s, run, 0, 0)
	if _, ok := s.Detail["host_cpu_us_per_frame"]; ok {
		t.Errorf("host CPU per frame without frames: %v", s.Detail)
	}
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

// TestKVMStatsHoldTheVM: the stats hold a counter file of the VM open
// until Close. In KVM an open counter file keeps its VM, so the counts
// are still there when the VMM has exited before its result line was
// read (on a loaded host: "kvm stats: open .../exits: no such file").
func TestKVMStatsHoldTheVM(t *testing.T) {
	root := fakeDebugfs(t, map[string]map[string]string{"7-3": {"exits": "42\n", "io_exits": "5\n"}})
	proc := fakeProc(t, map[int]struct {
		tids []int
		fds  map[int]string
	}{7: {[]int{7}, map[int]string{3: "anon_inode:kvm-vm"}}})
	held := func() bool {
		fds, _ := os.ReadDir("/proc/self/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); l == filepath.Join(root, "7-3", "exits") {
				return true
			}
		}
		return false
	}
	s, err := openVMStats(root, proc, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !held() {
		t.Error("no counter file of the VM is held open")
	}
	c, err := s.Read()
	if err != nil || c["exits"] != 42 || c["io_exits"] != 5 {
		t.Errorf("Read: %v, %v; want exits 42, io_exits 5", c, err)
	}
	s.Close()
	if held() {
		t.Error("Close left the counter file open")
	}
}
