package device

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/ethframe"
	"tinyvmm/internal/schedstat"
	"tinyvmm/internal/scratchns"
)

// BackendRow compares ways of taking frames from the host kernel: how many
// frames each system call brings and what a frame costs the reader thread.
type BackendRow struct {
	Mechanism        string  `json:"mechanism"`
	PPS              float64 `json:"pps"`
	FramesPerSyscall float64 `json:"frames_per_syscall"`
	NsPerFrame       float64 `json:"reader_cpu_ns_per_frame"`
}

// Mechanisms compared by backendRun.
var mechanisms = []string{"tap readv loop", "af_packet recvmmsg 64"}

// backendRun floods 64-byte frames from the host side for d and reads them
// with one mechanism: non-blocking readv on a tap until EAGAIN (what the
// device does), or recvmmsg of up to 64 frames on an AF_PACKET socket on a
// veth (what an af_packet backend would do). After each drain the reader
// sleeps 0.5 ms so that frames wait for it, as they do for a busy device.
// Syscalls counted are the reads (the sleeps are not).
func backendRun(mech string, d time.Duration) (BackendRow, error) {
	row := BackendRow{Mechanism: mech}
	ns, err := scratchns.New("tvdev")
	if err != nil {
		return row, err
	}
	defer ns.Close()
	var rfd int
	var sendName string
	switch mech {
	case mechanisms[0]:
		if _, err := ns.AddTap("tap0", "10.0.2.1/24"); err != nil {
			return row, err
		}
		err = ns.Do(func() error {
			var err error
			rfd, err = openTapFd("tap0")
			return err
		})
		sendName = "tap0"
	case mechanisms[1]:
		if err := ns.AddVeth("vh0", "vg0"); err != nil {
			return row, err
		}
		err = ns.Do(func() error {
			var err error
			if rfd, err = packetSocket("vg0", true); err == nil {
				unix.SetsockoptInt(rfd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
			}
			return err
		})
		sendName = "vh0"
	default:
		return row, fmt.Errorf("unknown mechanism %q", mech)
	}
	if err != nil {
		return row, err
	}
	defer unix.Close(rfd)
	var sfd int
	if err := ns.Do(func() error {
		var err error
		sfd, err = packetSocket(sendName, false)
		return err
	}); err != nil {
		return row, err
	}
	defer unix.Close(sfd)
	frame := ethframe.AppendUDP(nil, otherMAC, net.HardwareAddr{2, 0, 0, 0, 0, 1}, HostIP, GuestIP, 5000, 9,
		make([]byte, 64-ethframe.EthLen-ethframe.IPv4Len-ethframe.UDPLen))
	var stopSend, stopRead atomic.Bool
	var frames, syscalls atomic.Uint64
	var tid atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); hostFlood(sfd, [][]byte{frame}, &stopSend) }()
	go func() {
		defer wg.Done()
		readLoop(mech, rfd, &stopRead, &frames, &syscalls, &tid)
	}()
	time.Sleep(30 * time.Millisecond)
	for wait := time.Now(); tid.Load() == 0 && time.Since(wait) < 5*time.Second; {
		time.Sleep(time.Millisecond) // a starved reader has not started yet
	}
	f0, s0, c0 := frames.Load(), syscalls.Load(), threadCPUSample(&tid)
	start := time.Now()
	time.Sleep(d)
	f1, s1, c1 := frames.Load(), syscalls.Load(), threadCPUSample(&tid)
	elapsed := time.Since(start)
	stopSend.Store(true)
	stopRead.Store(true)
	wg.Wait()
	n := float64(f1 - f0)
	if n == 0 {
		return row, fmt.Errorf("%s: no frames read", mech)
	}
	row.PPS = n / elapsed.Seconds()
	row.FramesPerSyscall = n / float64(s1-s0)
	row.NsPerFrame = float64(c1-c0) / n
	return row, nil
}

// threadCPUSample returns the CPU time of the reader thread, whose id the
// reader publishes in tid. It is read here, at the moment of the sample:
// a reader that published its own time now and then left a starved one's
// last frames with no CPU at all (a loaded machine).
func threadCPUSample(tid *atomic.Int64) uint64 { return schedstat.ThreadCPU(int(tid.Load())) }

// readLoop reads frames until stop, counting frames and system calls; it
// publishes its thread's id in tid first.
func readLoop(mech string, fd int, stop *atomic.Bool, frames, syscalls *atomic.Uint64, tid *atomic.Int64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid.Store(int64(unix.Gettid()))
	const batch = 64
	bufs := make([][2048]byte, batch)
	iovs := make([]unix.Iovec, batch)
	msgs := make([]mmsghdr, batch)
	for i := range msgs {
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(len(bufs[i]))
		msgs[i].hdr.Iov = &iovs[i]
		msgs[i].hdr.SetIovlen(1)
	}
	for !stop.Load() {
		var n int
		var e unix.Errno
		if mech == mechanisms[0] {
			r, _, errno := unix.Syscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iovs[0])), 1)
			n, e = int(min(r, 1)), errno
		} else {
			r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), batch,
				unix.MSG_DONTWAIT, 0, 0)
			n, e = int(r), errno
		}
		syscalls.Add(1)
		if e == 0 {
			frames.Add(uint64(n))
		} else if e == unix.EAGAIN {
			// Let a backlog build, so that each drain shows what the
			// mechanism costs per frame when frames are waiting.
			time.Sleep(500 * time.Microsecond)
		}
	}
}

func openTapFd(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// packetSocket opens an AF_PACKET socket on ifname; one that does not
// receive (protocol 0) is for sending only and gets no copies of its own
// frames.
func packetSocket(ifname string, receive bool) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, err
	}
	proto := uint16(0)
	if receive {
		proto = htons(unix.ETH_P_ALL)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, err
	}
	unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
