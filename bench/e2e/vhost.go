package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// QEMU with vhost=on hands its virtio-net datapath to the kernel's
// vhost-net: a worker thread named "vhost-PID", PID being the QEMU thread
// that made the device its own (VHOST_SET_OWNER). Up to Linux 6.3 that
// worker is a kernel thread, a process of its own (a child of kthreadd)
// that neither /proc/QEMU/task lists nor QEMU's CPU affinity covers; from
// 6.4 it is a task of QEMU's own thread group, listed with QEMU's threads.
// Either way it is the device's work: --pin places it with the VMM's other
// non-vCPU threads (libvirt's emulatorpin does the same through the
// cgroup vhost attaches the worker to), and its CPU time counts in the
// VMM's host CPU per frame.

// vhostNet is the character device QEMU opens for vhost=on (a variable
// for the tests).
var vhostNet = "/dev/vhost-net"

// vhostWorkers are the pids of the kernel's vhost workers that serve the
// process pid and are not threads of it: processes under proc named
// "vhost-TID" for a thread TID of pid. Sorted; none when vhost serves no
// thread of pid or its workers are pid's own threads (Linux 6.4 on).
func vhostWorkers(proc string, pid int) ([]int, error) {
	tasks, err := os.ReadDir(filepath.Join(proc, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	own := map[string]bool{}
	for _, t := range tasks {
		own[t.Name()] = true
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	var workers []int
	for _, e := range ents {
		w, err := strconv.Atoi(e.Name())
		if err != nil || own[e.Name()] {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil {
			continue // gone meanwhile
		}
		owner, ok := strings.CutPrefix(strings.TrimSpace(string(comm)), "vhost-")
		if ok && own[owner] {
			workers = append(workers, w)
		}
	}
	slices.Sort(workers)
	return workers, nil
}
