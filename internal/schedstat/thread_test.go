package schedstat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stat is a stat line as the kernel writes it, with comm, state, utime,
// stime, processor and guest_time set, and policy 5 (SCHED_IDLE).
func stat(comm, state, utime, stime, cpu, guest string) string {
	f := strings.Fields("7549 (x) R 7506 7506 6739 0 -1 4194304 97 0 0 0 0 0 0 0 20 0 1 0 1315834 3133440 393 18446744073709551615 94014048428032 94014048447913 140725206760032 0 0 0 0 0 0 0 0 0 17 1 0 5 0 0 0 94014048463920 94014048465536 94015026384896 140725206764012 140725206764032 140725206764032 140725206765547 0")
	f[1], f[2], f[13], f[14], f[38], f[42] = "("+comm+")", state, utime, stime, cpu, guest
	return strings.Join(f, " ") + "\n"
}

func TestParseStat(t *testing.T) {
	// QEMU names its vCPU threads "CPU 0/KVM"; a name may hold ") " too.
	for _, comm := range []string{"tinyvmm", "CPU 0/KVM", "a) S 1 (b", "((", ""} {
		var th Thread
		if err := th.parseStat([]byte(stat(comm, "S", "300", "15", "1", "280"))); err != nil {
			t.Fatalf("comm %q: %v", comm, err)
		}
		if want := (Thread{State: "S", UserTicks: 300, SystemTicks: 15, CPU: 1, GuestTicks: 280, Policy: 5}); th != want {
			t.Errorf("comm %q: %+v, want %+v", comm, th, want)
		}
	}
	for _, bad := range []string{
		"",
		"12 (x R 1 2",                       // no end to comm
		"12 (x) R 1 2 3\n",                  // cut short
		stat("x", "R", "-1", "0", "0", "0"), // not a count
		stat("x", "R", "1", "2", "3", "4x"), // nor this
	} {
		th := Thread{State: "keep"}
		if err := th.parseStat([]byte(bad)); err == nil || th.State != "keep" {
			t.Errorf("stat %q: err %v, %+v; want an error and nothing set", bad, err, th)
		}
	}
}

func TestParseStatus(t *testing.T) {
	var th Thread
	in := "Name:\tCPU 0/KVM\nUmask:\t0022\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n"
	if err := th.parseStatus([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if want := (Thread{Name: "CPU 0/KVM", Voluntary: 17, Involuntary: 4}); th != want {
		t.Errorf("%+v, want %+v", th, want)
	}
	for _, bad := range []string{
		"",
		"Name:\tx\nvoluntary_ctxt_switches:\t17\n", // no nonvoluntary line
		"Name:\tx\nvoluntary_ctxt_switches:\tmany\nnonvoluntary_ctxt_switches:\t4\n",
	} {
		th := Thread{Name: "keep"}
		if err := th.parseStatus([]byte(bad)); err == nil || th.Name != "keep" {
			t.Errorf("status %q: err %v, %+v; want an error and nothing set", bad, err, th)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	var th Thread
	if err := th.parseSchedstat([]byte("5249063 1033372 5\n")); err != nil || th.RunNs != 5249063 || th.WaitNs != 1033372 {
		t.Errorf("%+v, %v", th, err)
	}
	for _, bad := range []string{"", "\n", "42\n", "x 1 2", "1 -2 3"} {
		th := Thread{RunNs: 9}
		if err := th.parseSchedstat([]byte(bad)); err == nil || th.RunNs != 9 {
			t.Errorf("schedstat %q: err %v, %+v; want an error and nothing set", bad, err, th)
		}
	}
}

// A thread's files, all or some: a file that is missing leaves its own
// fields zero; without stat, or its directory, the thread has ended.
func TestReadThreadMissingFiles(t *testing.T) {
	files := map[string]string{
		"stat":      stat("tiny vmm", "R", "100", "10", "1", "90"),
		"status":    "Name:\ttinyvmm\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t1\n",
		"schedstat": "5 7 3\n",
	}
	all := Thread{Name: "tinyvmm", State: "R", Voluntary: 10, Involuntary: 1, UserTicks: 100, SystemTicks: 10, GuestTicks: 90, CPU: 1, Policy: 5, RunNs: 5, WaitNs: 7}
	for _, missing := range []string{"", "status", "schedstat", "stat"} {
		dir := t.TempDir()
		for name, s := range files {
			if name != missing {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		th, err := ReadThread(dir)
		want := all
		switch missing {
		case "":
			if err != nil {
				t.Errorf("all files: %v", err)
			}
		case "status":
			want.Name, want.Voluntary, want.Involuntary = "", 0, 0
		case "schedstat":
			want.RunNs, want.WaitNs = 0, 0
		case "stat":
			want = Thread{}
		}
		if missing != "" && (err == nil || errors.Is(err, ErrEnded) != (missing == "stat")) {
			t.Errorf("without %s: err %v", missing, err)
		}
		if th != want {
			t.Errorf("without %q: %+v, want %+v", missing, th, want)
		}
	}
	if th, err := ReadThread(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, ErrEnded) || th != (Thread{}) {
		t.Errorf("no directory: %+v, %v; want ErrEnded", th, err)
	}
}

// This test's own thread reads whole; one that does not exist has ended.
func TestReadThreadOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no schedstat in /proc:", err)
	}
	th, err := ReadThread("/proc/self")
	if err != nil || th.Name == "" || th.State == "" || th.RunNs == 0 {
		t.Errorf("this process: %+v, %v", th, err)
	}
	if _, err := ReadThread("/proc/self/task/-1"); !errors.Is(err, ErrEnded) {
		t.Errorf("a thread that does not exist: %v, want ErrEnded", err)
	}
}
