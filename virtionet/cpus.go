package virtionet

import (
	"time"

	"golang.org/x/sys/unix"
)

// cpuCheckEvery is how often a worker looks again at where it and the
// vCPUs may run: an operator may pin threads at any time (libvirt's
// vcpupin and emulatorpin do it after start).
const cpuCheckEvery = time.Second

// pollsLone reports whether frames that come alone on queue qi start busy
// polling (Tuning.PollLone): only where this worker can keep off the
// vCPUs' CPUs, and while their answers come within the poll (worker.moved).
func (w *worker) pollsLone(qi int) bool {
	return w.tuning.PollLone && w.answersInPoll(qi) && w.ownCPU()
}

// ownCPU reports whether this worker can run where no vCPU may, as last
// looked at (every cpuCheckEvery); false while the vCPUs are unknown.
func (w *worker) ownCPU() bool {
	w.checkCPUs()
	return w.cpus.own
}

// apartFromVCPUs reports whether this worker may run only where no vCPU
// may (pinned apart), as last looked at; false while the vCPUs are
// unknown.
func (w *worker) apartFromVCPUs() bool {
	w.checkCPUs()
	return w.cpus.apart
}

func (w *worker) checkCPUs() {
	if w.d.cfg.VCPUThreads == nil {
		return
	}
	if now := time.Now(); now.Sub(w.cpusCheckedAt) > cpuCheckEvery {
		w.cpusCheckedAt, w.cpus = now, roomBeside(w.d.cfg.VCPUThreads())
	}
}

// cpuRoom is where a thread may run beside the vCPU threads: own, on a
// CPU none of them may use or on more CPUs than there are vCPUs; apart,
// on no CPU any of them may use.
type cpuRoom struct{ own, apart bool }

// roomBeside reads the affinities of the calling thread and of the vCPU
// threads vcpus; neither is true when any of them cannot be read.
func roomBeside(vcpus []int) cpuRoom {
	var self, theirs unix.CPUSet
	if len(vcpus) == 0 || unix.SchedGetaffinity(0, &self) != nil {
		return cpuRoom{}
	}
	for _, tid := range vcpus {
		var s unix.CPUSet
		if unix.SchedGetaffinity(tid, &s) != nil {
			return cpuRoom{}
		}
		for i := range s {
			theirs[i] |= s[i]
		}
	}
	return cpuRoom{own: hasFreeCPU(self, theirs, len(vcpus)), apart: disjoint(self, theirs)}
}

func disjoint(a, b unix.CPUSet) bool {
	for i := range a {
		if a[i]&b[i] != 0 {
			return false
		}
	}
	return true
}

// hasFreeCPU: self holds a CPU outside theirs, or more CPUs than n vCPUs
// can take at once.
func hasFreeCPU(self, theirs unix.CPUSet, n int) bool {
	for i := range self {
		if self[i]&^theirs[i] != 0 {
			return true
		}
	}
	return self.Count() > n
}
