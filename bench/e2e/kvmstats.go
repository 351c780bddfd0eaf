package e2e

import "tinyvmm/bench/kvmstat"

// exitDetail turns a run's counter deltas into a sample's details: the raw
// counts as kvm_NAME and, per frame the guest moved, exits_per_frame,
// irqs_per_frame (interrupts KVM injected) and kicks_per_frame (the guest's
// own count of notify writes, the same guest code under both VMMs; each
// is one exit, to an ioeventfd or to the VMM). No frames, no ratios.
//
// exits_per_frame leaves out io_exits. The bench guest's loops do no port
// I/O (its notifies are MMIO); its only port I/O in the window is the
// serial console's result line, two exits a byte, which goes by before the
// harness reads the line's start and closes the window. How much of it
// goes by depends on how soon the harness gets a CPU, not on the VMM's
// datapath (1-CPU L1, 64 B tx: 212 port exits under tinyvmm, 24 under
// QEMU, in a window of ~670 and ~160).
func exitDetail(d kvmstat.Counts, frames, kicks float64) map[string]float64 {
	m := map[string]float64{}
	for _, k := range kvmstat.Names {
		if v, ok := d[k]; ok {
			m["kvm_"+k] = float64(v)
		}
	}
	if frames <= 0 {
		return m
	}
	if v, ok := d["exits"]; ok {
		m["exits_per_frame"] = float64(v-min(v, d["io_exits"])) / frames
	}
	if v, ok := d["irq_injections"]; ok {
		m["irqs_per_frame"] = float64(v) / frames
	}
	m["kicks_per_frame"] = kicks / frames
	return m
}
