package vmm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/kvm"
)

// BootTimerPort is where the guest's /init writes one byte as it starts, and
// tinyvmm notes the time (Firecracker's boot timer, at its old x86 port).
// No PC device lives there in a tinyvmm guest, so nothing else writes it.
const BootTimerPort = 0x3f0

// processStart is when package vmm was initialized: after exec, the Go
// runtime's start and the init of the packages before it (most of the
// binary's), so --stats can tell those apart from tinyvmm's own set-up. The
// boot benchmark times that first part from its spawn of the process.
var processStart = time.Now()

// BootStats are the timestamps of one boot, as Unix nanoseconds
// (CLOCK_REALTIME) so that another process, the boot benchmark, can take
// them from its own clock; and what the boot cost when /init started.
type BootStats struct {
	ProcessUnixNs  int64 `json:"process_unix_ns"`
	RunUnixNs      int64 `json:"vmm_run_unix_ns"`
	FirstRunUnixNs int64 `json:"first_kvm_run_unix_ns"`
	// InitUnixNs is when the boot timer was written; 0 if it never was.
	InitUnixNs int64 `json:"init_unix_ns"`
	StopUnixNs int64 `json:"stop_unix_ns"`
	// KVMStatsAtInit are KVM's counters (exits by reason, ...) summed over
	// the vCPUs, read when the boot timer was written.
	KVMStatsAtInit map[string]uint64 `json:"kvm_stats_at_init,omitempty"`
	// PeakRSSKiBAtInit is VmHWM then; GuestTouchedKiBAtInit the guest RAM
	// resident then, so their difference is tinyvmm's own memory.
	PeakRSSKiBAtInit      int64 `json:"peak_rss_kib_at_init"`
	GuestTouchedKiBAtInit int64 `json:"guest_touched_kib_at_init"`
	// PeakRSSKiBAtRun and GuestTouchedKiBAtRun are the same at the first
	// exit from KVM_RUN: the set-up's own memory, measurable even where the
	// guest never reaches /init (PVM).
	PeakRSSKiBAtRun      int64  `json:"peak_rss_kib_at_run"`
	GuestTouchedKiBAtRun int64  `json:"guest_touched_kib_at_run"`
	Error                string `json:"error,omitempty"`
	// SetupMs is how long each step of tinyvmm's set-up took, in order.
	SetupMs []SetupStep `json:"setup_ms,omitempty"`
}

// SetupStep is one step of the set-up before the first KVM_RUN.
type SetupStep struct {
	Step string  `json:"step"`
	Ms   float64 `json:"ms"`
}

// bootClock records a boot's milestones. Its zero value records nothing
// beyond timestamps; with stats fds it also samples KVM's counters.
type bootClock struct {
	// firstRun is the first KVM_RUN in ns since processStart, on the
	// monotonic clock the set-up steps are timed with, so that the steps
	// add up to it exactly (the wall clock may be slewed meanwhile).
	firstRun  atomic.Int64
	initAt    atomic.Int64
	once      sync.Once
	setupOnce sync.Once
	statsFDs  []int
	ram       *guestRAM
	setup     []SetupStep
	lastStep  time.Time
	atInit    BootStats // filled once, by the vCPU that wrote the timer
}

// step records that a set-up step just ended (the first one starts at
// processStart).
func (b *bootClock) step(name string) {
	now := time.Now()
	if b.lastStep.IsZero() {
		b.lastStep = processStart
	}
	b.setup = append(b.setup, SetupStep{name, millis(now.Sub(b.lastStep))})
	b.lastStep = now
}

// noteRun records the first KVM_RUN.
func (b *bootClock) noteRun() {
	if b.firstRun.Load() == 0 {
		b.firstRun.CompareAndSwap(0, max(int64(time.Since(processStart)), 1))
	}
}

// Read implements devices.BusDevice: the port reads as 0.
func (b *bootClock) Read(offset uint64, data []byte) { clear(data) }

// Write implements devices.BusDevice: the first write is /init starting.
// The counters are read right here, on the vCPU thread, so they stop at the
// write.
func (b *bootClock) Write(offset uint64, data []byte) {
	b.once.Do(func() {
		b.initAt.Store(time.Now().UnixNano())
		b.sample()
	})
}

// sampleSetup takes VmHWM and the guest RAM resident at the end of the
// set-up, once, when a vCPU is back from its first KVM_RUN: it costs ~0.4
// ms, 10+ ms under TCG, and on a 1-CPU host it delayed the first KVM_RUN
// when the main goroutine took it as the vCPUs started. It writes fields
// sample does not; stats reads them after the vCPUs stopped.
func (b *bootClock) sampleSetup(ram *guestRAM) {
	b.setupOnce.Do(func() { b.sampleSetupNow(ram) })
}

func (b *bootClock) sampleSetupNow(ram *guestRAM) {
	hwm, err := peakRSSKiB()
	if err != nil {
		return
	}
	n, err := ram.residentBytes()
	if err != nil {
		return
	}
	b.atInit.PeakRSSKiBAtRun, b.atInit.GuestTouchedKiBAtRun = hwm, int64(n>>10)
}

func (b *bootClock) sample() {
	var errs []string
	if len(b.statsFDs) > 0 {
		sum := map[string]uint64{}
		for _, fd := range b.statsFDs {
			s, err := kvm.ReadStats(fd)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			for k, v := range s {
				sum[k] += v
			}
		}
		b.atInit.KVMStatsAtInit = sum
	}
	hwm, err := peakRSSKiB()
	if err != nil {
		errs = append(errs, err.Error())
	}
	b.atInit.PeakRSSKiBAtInit = hwm
	if b.ram != nil {
		n, err := b.ram.residentBytes()
		if err != nil {
			errs = append(errs, err.Error())
		}
		b.atInit.GuestTouchedKiBAtInit = int64(n >> 10)
	}
	if len(errs) > 0 {
		b.atInit.Error = fmt.Sprint(errs)
	}
}

// stats puts the timestamps together; call it after the vCPUs stopped.
func (b *bootClock) stats(run, stop time.Time) BootStats {
	s := b.atInit
	s.ProcessUnixNs, s.RunUnixNs, s.StopUnixNs = processStart.UnixNano(), run.UnixNano(), stop.UnixNano()
	s.InitUnixNs = b.initAt.Load()
	s.SetupMs = b.setup
	first := b.firstRun.Load()
	if first != 0 {
		s.FirstRunUnixNs = processStart.UnixNano() + first
	}
	if first != 0 && !b.lastStep.IsZero() {
		// The vCPU goroutines' start: a new locked OS thread each, which
		// the scheduler must run (3-15 ms in the nested L1); with it the
		// steps add up to the first KVM_RUN.
		s.SetupMs = append(s.SetupMs[:len(s.SetupMs):len(s.SetupMs)], SetupStep{"vCPU threads to first KVM_RUN", millis(time.Duration(first) - b.lastStep.Sub(processStart))})
	}
	return s
}

func (b *bootClock) close() {
	for _, fd := range b.statsFDs {
		unix.Close(fd)
	}
	b.statsFDs = nil
}

// peakRSSKiB is VmHWM from /proc/self/status.
func peakRSSKiB() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return statusField(f, "VmHWM:")
}

// statusField finds "NAME: N kB" in a /proc/PID/status.
func statusField(f *os.File, name string) (int64, error) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte(name)); ok {
			fields := bytes.Fields(rest)
			if len(fields) >= 1 {
				return strconv.ParseInt(string(fields[0]), 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, f.Name())
}

// residentBytes counts the guest RAM pages this process has in memory:
// the present bit of each page in /proc/self/pagemap. (mincore would also
// count file pages that are only in the page cache, such as a kernel
// mapped copy-on-write that the guest has not touched.)
func (r *guestRAM) residentBytes() (uint64, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	const pagemapPresent = 1 << 63
	buf := make([]byte, 8*4096)
	var total uint64
	for _, reg := range r.regions {
		start := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(reg.Data)))) / pageSize
		pages := uint64(len(reg.Data)) / pageSize
		for done := uint64(0); done < pages; {
			chunk := buf[:8*min(pages-done, uint64(len(buf)/8))]
			if _, err := f.ReadAt(chunk, int64((start+done)*8)); err != nil {
				return 0, fmt.Errorf("pagemap: %w", err)
			}
			for i := 0; i < len(chunk); i += 8 {
				if binary.LittleEndian.Uint64(chunk[i:])&pagemapPresent != 0 {
					total++
				}
			}
			done += uint64(len(chunk) / 8)
		}
	}
	return total * pageSize, nil
}
