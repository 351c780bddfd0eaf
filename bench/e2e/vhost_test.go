package e2e

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"tinyvmm/kvm"
)

// vhostWorkers finds the kernel threads named after a thread of the VMM,
// and neither another VMM's nor the VMM's own threads.
func TestVhostWorkersFindsTheVMMsKernelWorkers(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, comm string, tasks ...string) {
		for _, tid := range append([]string{pid}, tasks...) {
			if err := os.MkdirAll(filepath.Join(proc, pid, "task", tid), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("9", "qemu-system-x86", "10", "11") // thread 11 is "vhost-9" of Linux 6.4 on: already a thread of 9
	mk("20", "vhost-9")                    // a kernel worker for QEMU's main thread
	mk("21", "vhost-10")                   // and one for another of its threads
	mk("22", "vhost-99")                   // another VMM's
	mk("23", "vhost-9x")
	mk("24", "kworker/0:1")
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := vhostWorkers(proc, 9)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{20, 21}) {
		t.Errorf("vhostWorkers = %v, want [20 21]", got)
	}
	if _, err := vhostWorkers(proc, 77); err == nil {
		t.Error("vhostWorkers of a process that is gone: no error")
	}
}

// qemu-vhost is QEMU's command line with vhost=on, and qemu keeps vhost=off.
func TestQEMUVhostCommandLine(t *testing.T) {
	c := GuestConfig{ELF: "g.elf", QEMU: "qemu-system-x86_64", QEMUAccel: "kvm"}
	netdev := func(v VMM) string {
		args := c.command(v, "mode=tx").Args
		i := slices.Index(args, "-netdev")
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("%s: no -netdev in %q", v, args)
		}
		return args[i+1]
	}
	if got, want := netdev(QEMUVhost), "tap,id=n0,ifname="+TapName+",script=no,downscript=no,vhost=on"; got != want {
		t.Errorf("qemu-vhost -netdev %s, want %s", got, want)
	}
	if got, want := netdev(QEMU), "tap,id=n0,ifname="+TapName+",script=no,downscript=no,vhost=off"; got != want {
		t.Errorf("qemu -netdev %s, want %s", got, want)
	}
	a, b := c.command(QEMUVhost, "mode=tx").Args, c.command(QEMU, "mode=tx").Args
	if len(a) != len(b) {
		t.Errorf("the two QEMU command lines differ beyond vhost:\n%q\n%q", a, b)
	}
	g := &guestProc{vmm: QEMUVhost}
	if !g.exitCodeOK(1) || g.exitCodeOK(0) {
		t.Error("qemu-vhost's exit code is isa-debug-exit's, as QEMU's")
	}
}

// The qemu-vhost column runs where QEMU and /dev/vhost-net do, compared
// exactly as QEMU's; every VMM cell has it.
func TestQEMUVhostColumn(t *testing.T) {
	o := DefaultOptions()
	o.QEMU = os.Args[0]
	defer func(v string) { vhostNet = v }(vhostNet)
	vhostNet = os.Args[0]
	host := kvm.Host{Usable: true}
	st := detectSystems(o, host)
	v := st[SysQEMUVhost]
	if v.Skip != "" || !v.Comparable || !strings.Contains(v.Label, "vhost") {
		t.Errorf("qemu-vhost with a vhost device: %+v", v)
	}
	vhostNet = filepath.Join(t.TempDir(), "vhost-net")
	if v := detectSystems(o, host)[SysQEMUVhost]; !strings.Contains(v.Skip, "vhost-net") {
		t.Errorf("qemu-vhost without a vhost device: %+v, want a skip that names it", v)
	}
	if q := detectSystems(o, host)[SysQEMU]; q.Skip != "" {
		t.Errorf("qemu without a vhost device: %+v", q)
	}
	for _, e := range o.experiments(&runner{}) {
		if slices.Contains(e.Systems, SysQEMU) != slices.Contains(e.Systems, SysQEMUVhost) {
			t.Errorf("cell %s: systems %v: qemu-vhost runs where qemu runs", e.Key, e.Systems)
		}
	}
}

// placeWorkers puts a worker on the CPUs of the VMM's other threads.
func TestPlaceWorkersWithTheRest(t *testing.T) {
	p, err := newPinning(false)
	if err != nil {
		t.Skip(err)
	}
	done := make(chan struct{})
	tid := make(chan int)
	go func() {
		runtime.LockOSThread() // this thread ends with the goroutine
		tid <- unix.Gettid()
		<-done
	}()
	w := <-tid
	defer close(done)
	if err := p.placeWorkers([]int{w}); err != nil {
		t.Fatal(err)
	}
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(w, &got); err != nil {
		t.Fatal(err)
	}
	if got != p.rest || got.IsSet(p.vcpuCPU) {
		t.Errorf("worker's CPUs %v, want %v (not the vCPU's %d)", got, p.rest, p.vcpuCPU)
	}
}
