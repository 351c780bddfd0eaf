package usernetbench

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tinyvmm/userproc"
)

// Threads born between two snapshots count from zero, and each group
// sums its threads.
func TestDiffGroups(t *testing.T) {
	before := map[int]threadStat{1: {group: "vmm:vcpu0", vol: 10, runNs: 100}, 2: {group: "usernet", vol: 5}}
	after := map[int]threadStat{1: {group: "vmm:vcpu0", vol: 15, runNs: 400}, 2: {group: "usernet", vol: 7}, 3: {group: "usernet", vol: 3, invol: 1, runNs: 50}}
	got := diff(before, after)
	if len(got) != 2 || got[0].group != "vmm:vcpu0" || got[0].vol != 5 || got[0].runNs != 300 {
		t.Fatalf("diff %+v", got)
	}
	if u := got[1]; u.group != "usernet" || u.threads != 2 || u.vol != 5 || u.invol != 1 || u.runNs != 50 || len(u.each) != 2 || u.each[0].tid != 3 {
		t.Errorf("usernet group %+v", u)
	}
}

// The console's cell lines, even split across writes, close one cell and
// open the next; the script's end closes the last.
func TestSchedWatchCells(t *testing.T) {
	w := &schedWatch{}
	w.Write([]byte("boot noise\ncell g2"))
	w.start(os.Getpid())
	w.Write([]byte("h\r\nsome output\ncell rr\n"))
	w.Write([]byte("BENCH-USERNET-DONE\n"))
	if len(w.results) != 2 || w.results[0].cell != "g2h" || w.results[1].cell != "rr" {
		t.Fatalf("cells %+v", w.results)
	}
	if !strings.Contains(w.String(), "some output") {
		t.Errorf("console lost: %q", w.String())
	}
	// CellsDone closes the last cell before the script's end, which then
	// adds nothing.
	w2 := &schedWatch{}
	w2.start(os.Getpid())
	w2.Write([]byte("cell rr\n" + CellsDone + "\n"))
	if len(w2.results) != 1 || w2.results[0].cell != "rr" {
		t.Errorf("at %q: cells %+v", CellsDone, w2.results)
	}
	w2.Write([]byte("BENCH-USERNET-DONE\n"))
	if len(w2.results) != 1 {
		t.Errorf("the end after %q: cells %+v", CellsDone, w2.results)
	}
	var out bytes.Buffer
	w.report(&out, "tinyvmm", 1, map[string]float64{"g2h": 8192, "rr": 50})
	if !strings.Contains(out.String(), "cell g2h (per KiB") || !strings.Contains(out.String(), "bench") {
		t.Errorf("report %q", out.String())
	}
}

// With signalChild, each marker sends SIGUSR1 to the tinyvmm-usernet
// under the system's process (here a sleep named so, under this one).
func TestSchedWatchSignalsUsernet(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	prog := filepath.Join(t.TempDir(), userproc.Program)
	b, err := os.ReadFile(sleep)
	if err != nil || os.WriteFile(prog, b, 0o755) != nil {
		t.Skip("cannot copy sleep:", err)
	}
	cmd := exec.Command(prog, "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Process.Kill()
	w := &schedWatch{signalChild: true}
	w.start(os.Getpid())
	w.Write([]byte("cell g2h\n"))
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGUSR1 {
		t.Errorf("the child ended with %v, want SIGUSR1", err)
	}
}

func TestSubCounts(t *testing.T) {
	d := subCounts(map[string]uint64{"exits": 10, "io_exits": 3, "new": 1}, map[string]uint64{"exits": 4, "io_exits": 3})
	if len(d) != 2 || d["exits"] != 6 || d["io_exits"] != 0 {
		t.Errorf("subCounts = %v, want exits 6, io_exits 0", d)
	}
	if subCounts(nil, map[string]uint64{"exits": 1}) != nil || subCounts(map[string]uint64{"exits": 1}, nil) != nil {
		t.Error("a missing end gave counts")
	}
}

// With --sched the script says CellsDone after its last cell and waits
// before its end, and is otherwise the same.
func TestSchedEndScript(t *testing.T) {
	plain := GuestScript([]string{"rr"}, 1, 2, 3, 4, 5)
	s := withSchedEnd(plain)
	if !strings.HasSuffix(s, "|| exit 1; i=$((i+1)); done && echo "+CellsDone+" && sleep 1 && echo BENCH-USERNET-DONE") {
		t.Errorf("script %q", s)
	}
	if strings.Replace(s, " && echo "+CellsDone+" && sleep 1", "", 1) != plain {
		t.Errorf("more than the end changed: %q", s)
	}
}

// A snapshot counts the threads of every root it is given (qemu-passt's
// passt is no child of QEMU), and a root that is gone adds nothing.
func TestSnapshotOfSeveralRoots(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	snap := snapshot(1<<30, cmd.Process.Pid)
	if ts, ok := snap[cmd.Process.Pid]; !ok || ts.group != "sleep" {
		t.Errorf("sleep's thread %+v (present %v) in %d threads", ts, ok, len(snap))
	}
}
