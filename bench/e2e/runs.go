package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// System is one column of the comparison.
type System string

const (
	SysTinyvmm System = "tinyvmm"
	SysCeiling System = "ceiling"
	SysQEMU    System = "qemu"
	// SysQEMUVhost is QEMU with vhost=on: the kernel's vhost-net moves
	// the frames (vhost.go).
	SysQEMUVhost System = "qemu-vhost"
)

// Sample is one run's outcome: the headline value and the details behind it.
type Sample struct {
	Value  float64            `json:"value"`
	Detail map[string]float64 `json:"detail,omitempty"`
	Err    string             `json:"error,omitempty"`
	Note   string             `json:"note,omitempty"` // e.g. why KVM's counters are missing
	// Guest is what a Linux guest was given and chose (lxSysinfo).
	Guest map[string]string `json:"guest,omitempty"`
}

func failed(err error) Sample { return Sample{Err: err.Error()} }

// runner runs single measurements; each one in a namespace of its own.
type runner struct {
	cfg     GuestConfig
	secs    int
	tscKHz  uint64
	bootMax time.Duration // how long a boot may take before it counts as failed
	// cmdlineExtra goes on every guest command line (cpl3=1 in tests).
	cmdlineExtra string
	// cpuprofile, when set, is passed to tinyvmm's tx runs as --cpuprofile,
	// and cpuprofile+".rx" to its rx runs: each run overwrites its file, so
	// they hold the last tinyvmm tx and rx run.
	cpuprofile string
	// pin, with --pin, gives each run's vCPU a CPU of its own (pin.go).
	pin *pinning
	// lxHelper is the program that runs `bench e2e lxguest` in the Linux
	// guest: this lab command itself.
	lxHelper string
	// The Linux guest (linux.go), made once by lxPrepare in lxDir.
	lxOnce sync.Once
	lx     *lxGuest
	lxErr  error
	lxDir  string
}

func (r *runner) guestTimeout() time.Duration {
	return r.bootMax + time.Duration(r.secs)*time.Second + 15*time.Second
}

func inNamespace(f func(ns *Namespace) Sample) Sample {
	ns, err := NewNamespace()
	if err != nil {
		return failed(err)
	}
	defer ns.Close()
	return f(ns)
}

// tx measures guest->host frames per second at size bytes with a notify
// decision every kick frames, counted by a sink on the host side.
func (r *runner) tx(sys System, size, kick int, vmmArgs []string) Sample {
	if r.cpuprofile != "" && sys == SysTinyvmm {
		vmmArgs = append(slices.Clone(vmmArgs), "--cpuprofile", r.cpuprofile)
	}
	return inNamespace(func(ns *Namespace) Sample {
		sink, err := StartSink(ns)
		if err != nil {
			return failed(err)
		}
		drops0 := backlogDrops()
		var guestPPS, frames, kicks, stalls, calls float64
		var run *GuestRun
		if sys == SysCeiling {
			res, err := CeilingTx(ns, size, time.Duration(r.secs)*time.Second, r.pin)
			if err != nil {
				sink.Stop()
				return failed(err)
			}
			guestPPS, frames = res.PPS(), float64(res.Frames)
			calls = float64(res.Calls)
		} else {
			var err error
			run, err = r.guest(ns, sys, vmmArgs, fmt.Sprintf("mode=tx size=%d secs=%d kick=%d", size, r.secs, kick), nil)
			if err != nil {
				sink.Stop()
				return failed(err)
			}
			// Frames the device took back (used), not merely offered.
			guestPPS, frames = float64(run.Uint("pps")), float64(run.Uint("completed"))
			// Notifies the guest wrote (each a VM exit) and its full-ring waits.
			kicks, stalls = float64(run.Uint("kicks")), float64(run.Uint("stalls"))
		}
		// The last frames may still be in flight: wait for every frame
		// sent, or for a second without one.
		got := sink.StopAfter(uint64(frames), time.Second)
		s := Sample{Value: got.PPS(), Detail: map[string]float64{
			"sender_pps": guestPPS, "sent": frames, "received": float64(got.Good),
			"corrupt": float64(got.Bad), "lost": float64(got.Lost), "reordered": float64(got.Reordered),
			"sink_drops": float64(got.SocketDrops), "kernel_drops": float64(backlogDrops() - drops0),
			"guest_kicks": kicks, "guest_stalls": stalls,
			"sink_cpu_ms": float64(got.Thread.RunNs) / 1e6, "sink_wait_ms": float64(got.Thread.WaitNs) / 1e6,
			"sink_policy": float64(got.Thread.Policy), "sink_preempted": float64(got.Thread.Involuntary), "sink_on_cpu": float64(got.Thread.CPU)}}
		switch {
		case got.Err != nil:
			s.Err = got.Err.Error()
		case got.Bad > 0:
			s.Err = fmt.Sprintf("%d corrupted frames", got.Bad)
		case got.Good == 0:
			s.Err = "no frame reached the host"
		}
		if run != nil {
			addExits(&s, run, frames, kicks)
		}
		if calls > 0 {
			s.Detail["frames_per_call"] = frames / calls // the ceiling's write(2) or io_uring
		}
		return s
	})
}

// rx measures host->guest frames per second: a sender in the namespace
// (send: the bench's socket sender or pktgen) floods 64-byte frames, the
// guest (or the ceiling) counts them. The guest polls its ring, or with
// irq it halts whenever the ring is empty and goes on at the device's
// interrupt, as a guest kernel does.
func (r *runner) rx(sys System, irq bool, send sendFunc, vmmArgs []string) Sample {
	if r.cpuprofile != "" && sys == SysTinyvmm {
		vmmArgs = append(slices.Clone(vmmArgs), "--cpuprofile", r.cpuprofile+".rx")
	}
	return inNamespace(func(ns *Namespace) Sample {
		dur := time.Duration(r.secs) * time.Second
		sendFor := dur + 500*time.Millisecond
		const maxFrames = 50_000_000
		if sys == SysCeiling {
			ready := make(chan struct{})
			type out struct {
				res CeilingResult
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := CeilingRx(ns, dur, 10*time.Second, ready, r.pin)
				done <- out{res, err}
			}()
			<-ready
			sent, err := SendFlood(ns, CeilingMAC, 64, sendFor, maxFrames)
			o := <-done
			if err == nil {
				err = o.err
			}
			if err != nil {
				return failed(err)
			}
			return rxSample(o.res.PPS(), float64(o.res.Rx.Good), float64(o.res.Rx.Bad), float64(o.res.Rx.Lost), sent)
		}
		var sent SendResult
		cmdline := fmt.Sprintf("mode=rx secs=%d", r.secs)
		if irq {
			cmdline += " irq=1"
		}
		run, err := r.guest(ns, sys, vmmArgs, cmdline, func(ready map[string]string) error {
			mac, err := net.ParseMAC(ready["mac"])
			if err != nil {
				return fmt.Errorf("guest ready line without a MAC: %v", ready)
			}
			sent, err = send(ns, mac, 64, sendFor, maxFrames)
			return err
		})
		if err != nil {
			return failed(err)
		}
		s := rxSample(float64(run.Uint("pps")), float64(run.Uint("frames")), float64(run.Uint("bad")), float64(run.Uint("lost")), sent)
		s.Detail["guest_kicks"] = float64(run.Uint("kicks")) // rx buffers returned with a notify
		if pg := run.Uint("pktgen"); pg > 0 {
			s.Detail["guest_pktgen_frames"] = float64(pg)
		}
		if irq {
			addGuestIRQs(&s, run)
		}
		addExits(&s, run, float64(run.Uint("frames")), float64(run.Uint("kicks")))
		return s
	})
}

// addExits puts what KVM counted in the run's window into s: the raw
// counts and the per-frame ratios (exitDetail), and the VMM's io_urings;
// and the VMM's host CPU per frame (host_cpu_us_per_frame: all its
// threads outside guest mode, the device's work, the exits' handling and
// KVM's halt polling), which decides how many frames a host core moves.
func addExits(s *Sample, run *GuestRun, frames, kicks float64) {
	if run.IOURings >= 0 {
		s.Detail["io_uring_fds"] = float64(run.IOURings)
	}
	if run.KVM == nil {
		s.Note = run.KVMErr
		return
	}
	maps.Copy(s.Detail, exitDetail(run.KVM, frames, kicks))
	for k, v := range run.HostIRQs {
		s.Detail["host_irq_"+k] = float64(v)
	}
	for k, v := range run.Switches {
		s.Detail[k] = float64(v)
	}
	s.Detail["vmm_workers"] = float64(run.Workers)
	if _, ok := run.Switches["vmm_host_cpu_us"]; ok && frames > 0 {
		addCPUPerFrame(s.Detail, run.Switches, frames)
	}
}

// addCPUPerFrame puts the VMM's host CPU and run-queue wait per frame
// into d, in all and by thread name, and each thread name's wakeups and
// preemptions, exact time on a CPU (ran_us_per_frame:NAME) and, for a
// vCPU, its sampled guest time (guest_cpu_us_per_frame:NAME) per frame,
// from since's counts.
func addCPUPerFrame(d map[string]float64, sw map[string]uint64, frames float64) {
	d["host_cpu_us_per_frame"] = float64(sw["vmm_host_cpu_us"]) / frames
	d["runq_wait_us_per_frame"] = float64(sw["vmm_runq_wait_us"]) / frames
	for k, v := range sw {
		if name, ok := strings.CutPrefix(k, "vmm_runq_wait_us:"); ok {
			d["runq_wait_us_per_frame:"+name] = float64(v) / frames
		} else if name, ok := strings.CutPrefix(k, "vmm_host_cpu_us:"); ok {
			d["host_cpu_us_per_frame:"+name] = float64(v) / frames
		} else if name, ok := strings.CutPrefix(k, "vmm_wakeups:"); ok {
			d["wakeups_per_frame:"+name] = float64(v) / frames
		} else if name, ok := strings.CutPrefix(k, "vmm_preemptions:"); ok {
			d["preemptions_per_frame:"+name] = float64(v) / frames
		} else if name, ok := strings.CutPrefix(k, "vmm_ran_us:"); ok {
			d["ran_us_per_frame:"+name] = float64(v) / frames
		} else if name, ok := strings.CutPrefix(k, "vmm_guest_cpu_us:"); ok && v > 0 {
			d["guest_cpu_us_per_frame:"+name] = float64(v) / frames
		}
	}
}

// addGuestIRQs puts what an irq=1 guest counted into s: the rx interrupts
// it took and the times it found its ring empty and halted.
func addGuestIRQs(s *Sample, run *GuestRun) {
	s.Detail["guest_irqs"] = float64(run.Uint("irqs"))
	s.Detail["guest_halts"] = float64(run.Uint("halts"))
	if run.Result["irqs"] == "" && s.Err == "" {
		s.Err = "the guest's result has no irqs= (a bench guest built before irq=1?)"
	}
}

func rxSample(pps, good, bad, lost float64, sent SendResult) Sample {
	s := Sample{Value: pps, Detail: map[string]float64{"received": good, "corrupt": bad, "lost": lost, "sent": float64(sent.Sent),
		"sender_cpu_ms": float64(sent.CPU.Milliseconds()), "sender_ms": float64(sent.Duration.Milliseconds())}}
	if sent.Dropped > 0 {
		s.Detail["tap_drops"] = float64(sent.Dropped)
	}
	switch {
	case bad > 0:
		s.Err = fmt.Sprintf("%.0f corrupted frames", bad)
	case good == 0:
		s.Err = "no frame reached the guest"
	}
	return s
}

// Ping series: pingCount requests, one every pingInterval.
const (
	pingCount    = 200
	pingInterval = 10 * time.Millisecond
	pingTimeout  = time.Second
)

// pingMode is what the guest does while it answers pings.
type pingMode int

const (
	pingIdle    pingMode = iota // polls its rx ring
	pingFlood                   // polls and floods tx: experiment 002's setup
	pingIdleIRQ                 // halts until the rx interrupt (irq=1), as an idle guest kernel
)

// ping measures ICMP round trips to the guest (or the ceiling) while it
// answers in mode. The headline is the average; Detail has min/p99/max
// and the tx rate.
func (r *runner) ping(sys System, pm pingMode, vmmArgs []string) Sample {
	flood := pm == pingFlood
	return inNamespace(func(ns *Namespace) Sample {
		secs := r.secs + 3 // the series must fit in the guest's run
		maxTotal := time.Duration(secs-1) * time.Second
		cmdline := fmt.Sprintf("mode=echo secs=%d", secs)
		switch pm {
		case pingFlood:
			cmdline = fmt.Sprintf("mode=echo+tx size=64 secs=%d", secs)
		case pingIdleIRQ:
			cmdline += " irq=1"
		}
		var pr PingResult
		var txPPS float64
		var run *GuestRun
		if sys == SysCeiling && pm == pingIdleIRQ {
			return failed(errors.New("the ceiling has no guest to halt"))
		}
		if sys == SysCeiling {
			ready := make(chan struct{})
			type out struct {
				res CeilingResult
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := CeilingEcho(ns, flood, 64, time.Duration(secs)*time.Second, ready, r.pin)
				done <- out{res, err}
			}()
			<-ready
			var err error
			pr, err = Ping(ns, GuestIP, pingCount, pingInterval, pingTimeout, maxTotal)
			o := <-done
			if err == nil {
				err = o.err
			}
			if err != nil {
				return failed(err)
			}
			txPPS = o.res.PPS()
		} else {
			var err error
			run, err = r.guest(ns, sys, vmmArgs, cmdline, func(map[string]string) (err error) {
				pr, err = Ping(ns, GuestIP, pingCount, pingInterval, pingTimeout, maxTotal)
				return err
			})
			if err != nil {
				return failed(err)
			}
			txPPS = float64(run.Uint("pps"))
		}
		st := pr.Stats()
		s := Sample{Value: st.Avg, Detail: map[string]float64{"min_us": st.Min, "avg_us": st.Avg,
			"p99_us": st.P99, "max_us": st.Max, "lost": float64(st.Lost), "sent": float64(pr.Sent), "tx_pps": txPPS}}
		if len(pr.RTTs) == 0 {
			s.Err = fmt.Sprintf("no ping answered (%d sent)", pr.Sent)
		}
		if run != nil && !flood {
			// Per echo reply: the window holds the guest's whole run, so
			// L1's tick over it is in the exits too.
			addExits(&s, run, float64(run.Uint("icmp")), float64(run.Uint("kicks")))
		}
		if run != nil && pm == pingIdleIRQ {
			addGuestIRQs(&s, run)
		}
		return s
	})
}

// guest boots the bench guest under sys with cmdline, runs during (if not
// nil) once the guest is ready, and waits for its result.
func (r *runner) guest(ns *Namespace, sys System, vmmArgs []string, cmdline string, during func(ready map[string]string) error) (*GuestRun, error) {
	cfg := r.cfg
	cfg.TinyvmmArgs = vmmArgs
	cmdline += " tsc_khz=" + strconv.FormatUint(r.tscKHz, 10)
	if r.cmdlineExtra != "" {
		cmdline += " " + r.cmdlineExtra
	}
	g, err := startGuest(ns, cfg, VMM(sys), cmdline, r.pin)
	if err != nil {
		return nil, err
	}
	ready, err := g.waitReady(r.bootMax)
	if err != nil {
		g.kill()
		return nil, err
	}
	if during != nil {
		if err := during(ready); err != nil {
			g.kill()
			return nil, err
		}
	}
	return g.wait(r.guestTimeout())
}
