package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestHostIRQsOnVCPUsCPU(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := write("before", "           CPU0       CPU1\n"+
		" 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n"+
		"LOC:        100        200   Local timer interrupts\n"+
		"RES:         10         20   Rescheduling interrupts\n"+
		"TLB:          5          5   TLB shootdowns\n")
	after := write("after", "           CPU0       CPU1\n"+
		" 24:          9          0  IO-APIC   5-edge      ACPI:Ged\n"+
		"LOC:        150        290   Local timer interrupts\n"+
		"RES:         11         70   Rescheduling interrupts\n"+
		"TLB:          5          8   TLB shootdowns\n")
	b, err := readHostIRQs(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := readHostIRQs(after)
	if err != nil {
		t.Fatal(err)
	}
	// Thread 11 has the most guest time (field 43) and last ran on CPU 1
	// (field 39); its comm has a space and a paren, as QEMU's "CPU 0/KVM" has spaces.
	stat := func(cpu, guest string) string {
		f := make([]string, 44)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[1], f[2] = "11", "(CPU 0/KVM) x)", "R"
		f[38], f[42] = cpu, guest
		return strings.Join(f, " ") + "\n"
	}
	write("proc/7/task/10/stat", stat("0", "3"))
	write("proc/7/task/11/stat", stat("1", "500"))
	tid, cpu, err := vcpuThread(filepath.Join(dir, "proc"), 7)
	if err != nil || cpu != 1 || tid != 11 {
		t.Fatalf("vcpuThread = %d, %d, %v; want 11 on CPU 1", tid, cpu, err)
	}
	d := a.onCPU(b, cpu)
	if want := map[string]uint64{"LOC": 90, "RES": 50, "TLB": 3}; !maps.Equal(d, want) {
		t.Errorf("onCPU = %v, want %v", d, want)
	}
}

func TestThreadSwitchesSince(t *testing.T) {
	proc := t.TempDir()
	// write gives thread tid its switches and its CPU time in ticks:
	// utime, stime and guest_time (stat fields 14, 15 and 43).
	policy := map[string]string{} // a thread's scheduling policy, when not 0
	write := func(tid, vol, nonvol, utime, stime, guest string) {
		dir := filepath.Join(proc, "9", "task", tid)
		if tid == "20" { // vhost-net's worker: a kernel thread, a process of its own
			dir = filepath.Join(proc, "20", "task", "20")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		name := "tinyvmm"
		if tid == "20" {
			name = "vhost-9"
		}
		s := "Name:\t" + name + "\nvoluntary_ctxt_switches:\t" + vol + "\nnonvoluntary_ctxt_switches:\t" + nonvol + "\n"
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		f := make([]string, 44)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[1], f[2] = tid, "(tiny vmm)", "S"
		f[13], f[14], f[42] = utime, stime, guest
		if p, ok := policy[tid]; ok {
			f[40] = p
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(strings.Join(f, " ")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// schedstat: on-CPU ns, ns waiting for a CPU, timeslices; the
		// wait grows by 1 ms per voluntary switch here, and the time on a
		// CPU is the ticks' 10 ms each plus 1 ms per voluntary switch
		// (the exact time, which the ticks did not see).
		n, _ := strconv.Atoi(vol)
		u, _ := strconv.Atoi(utime)
		k, _ := strconv.Atoi(stime)
		ran := (u+k)*10000000 + n*1000000
		if err := os.WriteFile(filepath.Join(dir, "schedstat"), []byte(fmt.Sprintf("%d %d 7\n", ran, n*1000000)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("9", "10", "1", "100", "10", "90")
	write("10", "5", "0", "20", "30", "0")
	write("20", "100", "0", "0", "50", "0")
	before, err := readThreadSwitches(proc, 9, 20)
	if err != nil {
		t.Fatal(err)
	}
	write("9", "10", "3", "300", "15", "280") // preempted twice, never slept; 190 ticks in the guest, 15 out
	write("10", "45", "0", "25", "45", "0")   // slept 40 times; 5 ticks in user space, 15 in the kernel: the busiest
	write("11", "7", "1", "1", "2", "0")      // born in the window: 3 ticks
	write("20", "130", "0", "0", "62", "0")   // the vhost worker: 12 ticks in the kernel, 30 sleeps
	after, err := readThreadSwitches(proc, 9, 20)
	if err != nil {
		t.Fatal(err)
	}
	got := after.since(before, 9)
	want := map[string]uint64{"vmm_wakeups": 77, "vmm_preemptions": 3, "vmm_threads_woken": 3, "vmm_wakeups_max": 40, "vmm_wakeups_tid2": 40,
		"vmm_guest_cpu_ms": 1900, "vmm_host_cpu_ms": 500, "vmm_user_cpu_ms": 160, "vmm_sys_cpu_ms": 340,
		"vmm_busiest_user_cpu_ms": 50, "vmm_busiest_sys_cpu_ms": 150, "vmm_worker_cpu_ms": 120, "vmm_runq_wait_us": 77000,
		"vmm_wakeups:tinyvmm": 47, "vmm_preemptions:tinyvmm": 3, "vmm_wakeups:vhost": 30, "vmm_preemptions:vhost": 0,
		"vmm_host_cpu_ms:tinyvmm": 380, "vmm_runq_wait_us:tinyvmm": 47000, "vmm_host_cpu_ms:vhost": 120, "vmm_runq_wait_us:vhost": 30000,
		// exact: the ticks' 500 ms and 1 ms per voluntary switch (77)
		"vmm_host_cpu_us": 577000, "vmm_host_cpu_us:tinyvmm": 427000, "vmm_host_cpu_us:vhost": 150000,
		// the exact whole (2,050 + 240 + 37 ms) and the guest's 190 ticks
		"vmm_ran_us:tinyvmm": 2327000, "vmm_ran_us:vhost": 150000, "vmm_guest_cpu_us:tinyvmm": 1900000, "vmm_guest_cpu_us:vhost": 0}
	if !maps.Equal(got, want) {
		t.Errorf("since = %v, want %v", got, want)
	}
	// Without the worker, its CPU is not the VMM's.
	before, _ = readThreadSwitches(proc, 9)
	write("20", "140", "0", "0", "70", "0")
	after, _ = readThreadSwitches(proc, 9)
	if d := after.since(before, 9); d["vmm_host_cpu_ms"] != 0 || d["vmm_worker_cpu_ms"] != 0 {
		t.Errorf("a worker not asked for counted: %v", d)
	}
	// A thread in SCHED_IDLE waits by design: its wait is not the VMM's,
	// its wakeups and CPU are; it is counted by name.
	policy["10"] = "5"
	write("10", "45", "0", "25", "45", "0")
	before, _ = readThreadSwitches(proc, 9)
	write("10", "55", "0", "25", "46", "0")
	after, _ = readThreadSwitches(proc, 9)
	if d := after.since(before, 9); d["vmm_runq_wait_us"] != 0 || d["vmm_runq_wait_us:tinyvmm"] != 0 || d["vmm_wakeups"] != 10 || d["vmm_host_cpu_ms"] != 10 || d["vmm_sched_idle:tinyvmm"] != 1 {
		t.Errorf("an idle-class thread: %v; want its 10 wakeups and 10 ms, not its wait, and the thread counted as idle", d)
	}
}

// A thread named as a first vCPU is the vCPU's before it has a tick of
// guest time: pinning at the guest's ready line must not wait for the
// tick, which a vCPU sharing its CPU at start may lack for seconds.
func TestVCPUThreadByName(t *testing.T) {
	proc := t.TempDir()
	thread := func(tid, name, guest string) {
		dir := filepath.Join(proc, "7", "task", tid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f := make([]string, 44)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[1], f[2], f[38], f[42] = tid, "("+name+")", "S", "1", guest
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(strings.Join(f, " ")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\t"+name+"\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	thread("10", "tinyvmm", "0")
	thread("12", "net-tap0", "0")
	if tid, cpu, err := vcpuThread(proc, 7); err != nil || tid != 0 || cpu != -1 {
		t.Errorf("no vCPU yet: vcpuThread = %d, %d, %v; want 0, -1", tid, cpu, err)
	}
	thread("11", "vcpu0", "0")
	if tid, _, err := vcpuThread(proc, 7); err != nil || tid != 11 {
		t.Errorf("tinyvmm's vcpu0 without guest time: vcpuThread = %d, %v; want 11", tid, err)
	}
	thread("11", "CPU 0/KVM", "0")
	thread("13", "worker", "3") // a tick of guest time, but not the named vCPU
	if tid, _, err := vcpuThread(proc, 7); err != nil || tid != 11 {
		t.Errorf("QEMU's CPU 0/KVM without guest time: vcpuThread = %d, %v; want 11", tid, err)
	}
}
