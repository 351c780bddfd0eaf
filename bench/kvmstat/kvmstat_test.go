package kvmstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
	s, err := Open(root, proc, 1234)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{"exits": 12345, "io_exits": 7, "irq_injections": 1 << 40, "halt_exits": 0}
	if len(c) != len(want) {
		t.Errorf("counts %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d", k, c[k], v)
		}
	}
	for pid, why := range map[int]string{77: "has 2 VMs", 50: "has 0 VMs", 5: "no such file"} {
		if _, err := Open(root, proc, pid); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("pid %d: %v, want %q", pid, err, why)
		}
	}
	for _, pid := range []int{88, 99} {
		s, err := Open(root, proc, pid)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := s.Read(); err == nil {
			t.Errorf("pid %d read %v without error", pid, c)
		}
	}
	if _, err := Open(filepath.Join(root, "none"), proc, 1234); err == nil || !strings.Contains(err.Error(), "DEBUG_FS") {
		t.Errorf("no debugfs: %v", err)
	}
}

// TestReadDetail: the Detail counters come with Names where the kernel has
// them; a histogram's file (several numbers) and an absent one are left out.
func TestReadDetail(t *testing.T) {
	root := fakeDebugfs(t, map[string]map[string]string{
		"1240-11": {"exits": "120\n", "halt_exits": "3\n", "halt_poll_fail_ns": "250000\n",
			"halt_successful_poll": "2\n", "halt_wait_hist": "1 2 3\n", "halt_wait_ns": "x\n", "not_a_counter": "5\n"},
	})
	proc := fakeProc(t, map[int]struct {
		tids []int
		fds  map[int]string
	}{1234: {[]int{1234, 1240}, map[int]string{11: "anon_inode:kvm-vm"}}})
	s, err := Open(root, proc, 1234)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.ReadDetail()
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{"exits": 120, "halt_exits": 3, "halt_poll_fail_ns": 250000, "halt_successful_poll": 2}
	if len(c) != len(want) {
		t.Errorf("counts %v, want %v", c, want)
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d", k, c[k], v)
		}
	}
}

func TestKVMCountsSub(t *testing.T) {
	after := Counts{"exits": 1500, "io_exits": 30, "new": 5}
	d, err := after.Sub(Counts{"exits": 500, "io_exits": 30})
	if err != nil {
		t.Fatal(err)
	}
	if d["exits"] != 1000 || d["io_exits"] != 0 || len(d) != 2 {
		t.Errorf("delta %v", d)
	}
	if _, err := (Counts{"exits": 1}).Sub(Counts{"exits": 2}); err == nil {
		t.Error("a counter going backwards was accepted")
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
	v, err := ScanFDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.VCPUs) != 2 || v.VCPUs[0]+v.VCPUs[1] != 13 || v.IOURings != 2 || len(v.VMs) != 1 || v.VMs[0] != 3 {
		t.Errorf("scan: %+v", v)
	}
	if _, err := ScanFDs(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing dir scanned without error")
	}
}

// TestMarkReaderFiresAtTheMarker: the callback runs once, as the marker's
// last byte is read, also when reads split it, and the stream is unchanged.
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
	s, err := Open(root, proc, 7)
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
