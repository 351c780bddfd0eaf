package virtionet

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"

	"tinyvmm/ratelimit"
)

// Defaults of the datapath, from Linux drivers/vhost/net.c.
const (
	DefaultWeightPkts  = 256     // VHOST_NET_PKT_WEIGHT
	DefaultWeightBytes = 0x80000 // VHOST_NET_WEIGHT
	DefaultRxBatch     = 64      // VHOST_NET_BATCH
	// DefaultNotifyThreshold sets avail_event this many tx chains minus
	// one ahead during a burst (the guest kicks once per this many), is
	// the fewest frames a run moves to count as a burst, and the most tx
	// chains completed between two publishes of the used index where a
	// send group is smaller. 8 is the seed's own kick threshold, and was
	// on the plateau of four sweeps of `tinyvmm bench device --only 000`
	// (virtionet/README.md) when it also set the send group.
	DefaultNotifyThreshold = 8
	// DefaultTxYieldPkts is how often a tx run looks for frames waiting
	// for the guest (Tuning.TxYieldPkts), and so the most chains one
	// system call sends: VHOST_NET_BATCH, vhost-net's tx batch.
	DefaultTxYieldPkts = 64
	DefaultPollUs      = 200 // busy polling after a burst; see DefaultTuning
	// DefaultUserBatchBytes is Tuning.WorkerBatchBytes on a user network.
	// There each frame a busy vCPU kicks crosses to another process,
	// whose TCP (gVisor's) acknowledges it at once: with a worker that
	// preempted the vCPU at every kick, a guest writing 1 KiB at a time
	// sent each write alone, waited for its ACK, and took a tx and an rx
	// interrupt per KiB. Left running, the guest's TCP gathers its
	// writes (Nagle, autocorking) into TSO super-frames, as it does when
	// a slower gateway keeps one frame in flight (QEMU's slirp); in the
	// nested L1 that moved guest -> host bulk TCP several times
	// (bench/RESULTS.md, "bench usernet"). Below a full 1 KiB write, so
	// requests and ACKs are left as they were.
	DefaultUserBatchBytes = 1024
	DefaultMTU            = 1500
	DefaultQueueSize      = 256

	// MinMTU and MaxMTU bound Config.MTU: IPv4's minimum, and the most
	// the virtio-net config field (16 bits) can carry.
	MinMTU = 68
	MaxMTU = 65535
)

// IOMode is how the worker moves frames to and from the backend: the
// frameIO it runs (frameio*.go). Config.IO asks for one; the device
// decides once per queue pair what it runs (Device.IO reports that), and
// a uring that fails later falls back to writev for good.
type IOMode string

const (
	// IOWritev is one readv or writev per frame (vectorIO).
	IOWritev IOMode = "writev"
	// IOUring moves a group of frames per io_uring_enter (uringIO); a tap
	// only, and where io_uring is unavailable the device says so in one
	// line and runs IOWritev.
	IOUring IOMode = "uring"
	// IOSendmmsg is one sendmmsg or recvmmsg per group (mmsgIO): what a
	// socket backend (af_packet, the user network) always runs.
	IOSendmmsg IOMode = "sendmmsg"
)

// DefaultIO is the I/O of a tap that names none: io_uring moves a batch
// of frames per system call, 2-3x the frames/s of one writev per frame
// (virtionet/README.md), and falls back to writev, with a notice, where
// it is unavailable. This is the one place the default is stated.
const DefaultIO = IOUring

// ParseIO parses --net's io= value.
func ParseIO(s string) (IOMode, error) {
	switch m := IOMode(s); m {
	case IOWritev, IOUring:
		return m, nil
	}
	return "", fmt.Errorf("io %q: use writev (one system call per frame) or uring", s)
}

// ConfigError is a Config that breaks one of Normalized's rules. Error is
// the library's line ("net t0: mtu 67 is outside 68..65535"); Flag says
// the same in --net's words ("mtu=67 is outside 68..65535") for the CLI.
type ConfigError struct {
	Ifname string
	Msg    string
	Flag   string
	// QuoteArg: the CLI names the whole --net argument before Flag.
	QuoteArg bool
}

func (e *ConfigError) Error() string { return "net " + e.Ifname + ": " + e.Msg }

// Config is what the VMM (and the CLI) hand to New.
type Config struct {
	// Ifname is the host interface the device is on: the tap to open or
	// create, or, with AFPacket, that interface (New fills it in).
	Ifname string
	// AFPacket, instead of a tap, names a host interface that the guest
	// joins through an AF_PACKET socket (--net af_packet=IFNAME).
	AFPacket string
	// User puts the device on a user-mode network (--net user; the VMM
	// runs it, see userproc): Ifname only names it ("user0").
	User bool
	// IO is how the worker moves frames on a tap (--net ...,io=): ""
	// means DefaultIO. A socket backend (af_packet, user) always runs
	// IOSendmmsg, which Normalized fills in.
	IO IOMode
	// MAC is the guest's MAC; nil means a stable one derived from Ifname.
	MAC net.HardwareAddr
	// MTU offered to the guest (VIRTIO_NET_F_MTU); 0 means 1500.
	MTU int
	// QueueSize is the maximum size of each virtqueue; 0 means 256.
	QueueSize uint16
	// Queues is the number of rx/tx queue pairs (--net ...,queues=N),
	// each served by its own worker on its own tap queue; 0 means 1.
	// More than one offers VIRTIO_NET_F_MQ (multiqueue.go).
	Queues int
	Tuning
	// Pcap, when set, is a file that gets every frame, both directions,
	// as pcap (--net ...,pcap=FILE); see capture.go.
	Pcap string
	// RxLimit and TxLimit are token-bucket rate limits per direction
	// (--net ...,rx-rate=,tx-rate=,rx-pps=,tx-pps=); the buckets are package
	// ratelimit, the throttling throttle.go.
	RxLimit, TxLimit ratelimit.Limit
	// Trace, when set, gets one compact line per datapath event.
	Trace io.Writer
	// Log gets one-line notices ("created tap0"); nil discards them.
	Log func(format string, args ...any)
	// VCPUThreads, when set, lists the thread ids of the guest's vCPUs
	// (the VMM sets it): with Tuning.PollLone a worker busy-polls after
	// lone frames only where it can run on a CPU none of them may use.
	VCPUThreads func() []int

	normalized bool // Normalized has filled in the defaults and checked the rules
}

// Tuning holds the knobs of the vhost-style datapath (vhost-net's weights,
// batch and notification rules, and two of our own). Start from
// DefaultTuning: in a zero Tuning every weight means "unlimited".
type Tuning struct {
	// Weights bound one run of the worker on a queue; 0 means unlimited.
	// When one is hit the queue is requeued behind the other one.
	TxWeightPkts, TxWeightBytes int
	RxWeightPkts, RxWeightBytes int
	// TxYieldPkts: a tx run sends up to this many chains with one
	// system call (at most 64) and looks after each such group whether
	// frames for the guest wait on the backend, and if so gives rx its
	// turn before its weight is used up (tx.go rxWaiting); 0 never
	// looks, as vhost-net, where only the weights end a run, and sends
	// 64 at a time.
	TxYieldPkts int
	// RxBatch is how many frames rx reads per batch before it publishes
	// used entries once and signals once; 0 means DefaultRxBatch.
	RxBatch int
	// NotifyThreshold: during a tx burst the guest kicks once per this
	// many chains (avail_event), and a run that moves this many frames
	// is a burst; used entries are published after each send group, or
	// after this many chains where the groups are smaller; 0 means the
	// default.
	NotifyThreshold int
	// PollUs turns on busy polling, vhost-net's busyloop: for this many
	// microseconds after the last frame moved in either direction the
	// worker does not sleep. It leaves the guest's tx kicks off (and its
	// rx kicks, when rx buffers run out) and looks at the rings and the
	// backend again after each sched_yield, so it
	// takes no CPU that another thread wants (on a shared CPU the vCPU
	// keeps running and adding chains; no timer interrupts it) and spins
	// only on an otherwise idle CPU, at most PollUs after the traffic
	// stops. Then kicks are back on and the worker sleeps. 0 is off:
	// kicks every NotifyThreshold chains during bursts.
	PollUs int
	// RxIrqGapUs is the least time between two rx interrupts: one due
	// sooner is held until then and covers what is published meanwhile
	// (interrupt moderation, on top of EVENT_IDX's used_event). 0 is off.
	RxIrqGapUs int
	// WorkerBatch runs the worker thread under SCHED_BATCH while tx is
	// in a burst (its last run that moved frames moved
	// NotifyThreshold or more, or hit a budget): woken then, it does not preempt the
	// thread that is running (on a busy CPU, the vCPU adding frames) but
	// waits for its turn and finds more work; on an idle CPU it runs at
	// once. A short run (fewer frames, and fewer bytes than
	// WorkerBatchBytes) ends the burst and the thread is normal again, so
	// lone frames (pings) are served at once; the first after a flood may
	// wait for one time slice. rx bursts do the same where the worker and
	// the vCPUs are pinned to different CPUs: a frame from the backend
	// then does not preempt its sender, and the worker takes more per turn.
	// An rx run that moved the bytes of NotifyThreshold MTU frames is a
	// burst too (a TCP stream in GUEST_TSO frames of up to 64 KiB).
	WorkerBatch bool
	// WorkerBatchBytes (with WorkerBatch) counts a tx run that moved
	// this many bytes or more as a burst too, however few its frames: a
	// bulk sender's lone frame (a 1 KiB write that TCP sent by itself,
	// nothing else being in flight) leaves the worker under SCHED_BATCH,
	// so the sender's next kick does not preempt it. A request, an ACK
	// or a ping stays below it and keeps the normal policy. 0 is the
	// backend's default (DefaultUserBatchBytes on a user network, off on
	// a tap); below 0 is off.
	WorkerBatchBytes int
	// PollLone lets frames that come alone start busy polling too, not
	// only bursts, where the worker can run on a CPU that no vCPU thread
	// may use (Config.VCPUThreads; never when that is unknown). A ping
	// then finds the worker polling when the guest adds its reply, which
	// takes no kick (an exit) and no wakeup, as with vhost's busyloop.
	// Where the worker shares its only CPUs with vCPUs, a poll would hold
	// the reply until the vCPU's time slice ends, so lone frames keep
	// their kicks there. Each lone frame costs up to PollUs of CPU, so
	// lone frames poll only while the other direction has answered them
	// within PollUs, on average (worker.moved): a guest that halts
	// between interrupts and wakes slower than that keeps its kicks.
	PollLone bool
}

// DefaultTuning is Linux vhost-net's weights and batch, with busy polling
// (vhost's busyloop, off there) and SCHED_BATCH in bursts on: in the nested
// L1 the pair cut tx kicks per frame 2-3x against plain vhost rules and
// raised tx pps, idle ping the same, while the average ping under a tx
// flood rose (p99 still under QEMU's; bench/HISTORY.md). Busy polling
// starts only after a burst and ends PollUs after the last frame, so a
// quiet NIC costs no CPU. PollLone is off: against vhost-net, with a Linux
// guest that halts between interrupts, polls after lone frames cost the
// CPU the host's sender shares with the worker (TCP host->guest 0.76 of
// vhost's, request/response 0.54, against 1.15 and 0.87 without, paired,
// in one nested invocation; bench/RESULTS.md), while ping gained nothing.
func DefaultTuning() Tuning {
	return Tuning{
		TxWeightPkts: DefaultWeightPkts, TxWeightBytes: DefaultWeightBytes,
		RxWeightPkts: DefaultWeightPkts, RxWeightBytes: DefaultWeightBytes,
		TxYieldPkts: DefaultTxYieldPkts,
		RxBatch:     DefaultRxBatch, NotifyThreshold: DefaultNotifyThreshold,
		PollUs: DefaultPollUs, WorkerBatch: true,
	}
}

// Validate checks c as Normalized does, in one line, without opening
// anything.
func (c Config) Validate() error {
	_, err := c.Normalized()
	return err
}

// Normalized fills in the defaults and applies the rules, in one line:
// the only place either is stated. The VMM normalizes each NIC's config
// once, before it opens the backend; New takes a normalized config as it
// is (and normalizes any other). Queues 0 becomes 1: the VMM picks more
// (DefaultQueues) before it normalizes.
func (c Config) Normalized() (Config, error) {
	if c.normalized {
		return c, nil
	}
	if c.Ifname == "" {
		c.Ifname = c.AFPacket // names the device in messages and seeds its MAC
	}
	if c.Ifname == "" {
		return c, errors.New("--net needs tap=NAME or af_packet=IFNAME")
	}
	if c.User && c.AFPacket != "" {
		return c, &ConfigError{Ifname: c.Ifname, Msg: "a user network takes no af_packet=",
			Flag: "a user network takes no tap=, af_packet= or io=", QuoteArg: true}
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < MinMTU || c.MTU > MaxMTU {
		return c, &ConfigError{Ifname: c.Ifname, Msg: fmt.Sprintf("mtu %d is outside %d..%d", c.MTU, MinMTU, MaxMTU),
			Flag: fmt.Sprintf("mtu=%d is outside %d..%d", c.MTU, MinMTU, MaxMTU)}
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.QueueSize&(c.QueueSize-1) != 0 || c.QueueSize > 32768 {
		return c, fmt.Errorf("net %s: queue size %d is not a power of two up to 32768", c.Ifname, c.QueueSize)
	}
	if c.RxBatch == 0 {
		c.RxBatch = DefaultRxBatch
	}
	if c.NotifyThreshold == 0 {
		c.NotifyThreshold = DefaultNotifyThreshold
	}
	if c.WorkerBatchBytes == 0 && c.User {
		c.WorkerBatchBytes = DefaultUserBatchBytes
	}
	t := c.Tuning
	for _, v := range []int{t.TxWeightPkts, t.TxWeightBytes, t.RxWeightPkts, t.RxWeightBytes, t.TxYieldPkts, t.RxBatch, t.NotifyThreshold, t.PollUs, t.RxIrqGapUs} {
		if v < 0 {
			return c, fmt.Errorf("net %s: weights, rx batch, notify threshold and poll time must not be negative", c.Ifname)
		}
	}
	for _, b := range []struct {
		what string
		b    ratelimit.Bucket
	}{{"rx-rate", c.RxLimit.Bytes}, {"rx-pps", c.RxLimit.Frames}, {"tx-rate", c.TxLimit.Bytes}, {"tx-pps", c.TxLimit.Frames}} {
		if err := b.b.Validate(b.what); err != nil {
			return c, fmt.Errorf("net %s: %v", c.Ifname, err)
		}
	}
	if err := c.validQueues(); err != nil {
		return c, err
	}
	if err := c.normalizeIO(); err != nil {
		return c, err
	}
	if c.MAC == nil {
		c.MAC = DefaultMAC(c.Ifname)
	}
	if len(c.MAC) != 6 || c.MAC[0]&1 != 0 {
		return c, fmt.Errorf("net %s: mac %v is not a 6-byte unicast address", c.Ifname, c.MAC)
	}
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
	c.normalized = true
	return c, nil
}

// normalizeIO fills in Config.IO: DefaultIO on a tap, IOSendmmsg on a
// socket backend, which takes no io= but writev (it batches anyway).
func (c *Config) normalizeIO() error {
	switch {
	case c.User && c.IO != "":
		return &ConfigError{Ifname: c.Ifname, Msg: "a user network takes no io=",
			Flag: "a user network takes no tap=, af_packet= or io=", QuoteArg: true}
	case c.AFPacket != "" && c.IO == IOUring:
		return &ConfigError{Ifname: c.Ifname, Msg: "io=uring is for a tap; af_packet batches with sendmmsg already",
			Flag: "io=uring is for a tap; af_packet batches with sendmmsg already", QuoteArg: true}
	case c.User || c.AFPacket != "":
		if c.IO != "" && c.IO != IOWritev && c.IO != IOSendmmsg {
			return fmt.Errorf("net %s: io %q: af_packet batches with sendmmsg", c.Ifname, c.IO)
		}
		c.IO = IOSendmmsg
	case c.IO == "":
		c.IO = DefaultIO
	case c.IO != IOWritev && c.IO != IOUring:
		return fmt.Errorf("net %s: io %q: use writev or uring", c.Ifname, c.IO)
	}
	return nil
}

// DefaultMAC derives a stable, locally administered unicast MAC from the
// tap name, so a guest keeps its address across runs.
func DefaultMAC(tap string) net.HardwareAddr {
	h := fnv.New64a() // not crypto/sha256: that links crypto's FIPS module, ~1 ms of init per process in L1
	h.Write([]byte("tinyvmm:" + tap))
	mac := net.HardwareAddr(h.Sum(nil)[:6:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}

// ParseMAC parses a MAC for --net ...,mac=MAC with a one-line error.
func ParseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("mac %q is not of the form 52:54:00:12:34:56", s)
	}
	if mac[0]&1 != 0 {
		return nil, fmt.Errorf("mac %q is a multicast address; the first byte must be even", s)
	}
	return mac, nil
}
