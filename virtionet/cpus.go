package virtionet

import (
	"time"

	"golang.org/x/sys/unix"
)

// cpuCheckEvery is how often a worker looks again at where it and the
// vCPUs may run: an operator may pin threads at any time (libvirt's
// vcpupin and emulatorpin do it after start).
const cpuCheckEvery = time.Second

// pollsLone reports whether frames that come alone start busy polling
// (Tuning.PollLone): only where this worker can keep off the vCPUs' CPUs.
func (w *worker) pollsLone() bool { return w.tuning.PollLone && w.ownCPU() }

// ownCPU reports whether this worker can run where no vCPU may, as last
// looked at (every cpuCheckEvery); false while the vCPUs are unknown.
func (w *worker) ownCPU() bool {
	if w.d.cfg.VCPUThreads == nil {
		return false
	}
	if now := time.Now(); now.Sub(w.cpusCheckedAt) > cpuCheckEvery {
		w.cpusCheckedAt, w.cpuOfItsOwn = now, cpuOfItsOwn(w.d.cfg.VCPUThreads())
	}
	return w.cpuOfItsOwn
}

// cpuOfItsOwn reports whether the calling thread may run somewhere the
// vCPU threads vcpus leave free: on a CPU none of them may use, or on more
// CPUs than there are vCPUs. False when any affinity cannot be read.
func cpuOfItsOwn(vcpus []int) bool {
	var self, theirs unix.CPUSet
	if len(vcpus) == 0 || unix.SchedGetaffinity(0, &self) != nil {
		return false
	}
	for _, tid := range vcpus {
		var s unix.CPUSet
		if unix.SchedGetaffinity(tid, &s) != nil {
			return false
		}
		for i := range s {
			theirs[i] |= s[i]
		}
	}
	return hasFreeCPU(self, theirs, len(vcpus))
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
