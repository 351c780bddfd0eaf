package userproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"tinyvmm/internal/sysmon"
)

// Program is the user-mode network's executable.
const Program = "tinyvmm-usernet"

// sockBuf is the send buffer asked for on the device's end: room for a
// burst of full frames (capped at net.core.wmem_max without privilege).
const sockBuf = 4 << 20

// readyTimeout bounds the wait in Ready for the child's ready line (a
// variable for a test).
var readyTimeout = 10 * time.Second

// ChildTimerSlack is the timer slack (prctl PR_SET_TIMERSLACK) the child
// runs with, in place of Linux's 50 us. Its sleeps with a timeout are
// then up to this much longer, and the one that matters is Go's sysmon,
// the runtime's monitor thread: while the child's one P is busy (running,
// or waiting for the CPU the VMM's threads hold) sysmon sleeps 20 us at a
// time, for 50 turns and more after each wake by a system call or a
// garbage collection, and each turn is a context switch, on a host with
// one CPU a preemption of whoever runs. In the nested L1 that was ~73 of
// the child's ~81 voluntary switches per connection of the round-trip
// cell and a third of its CPU (bench/RESULTS.md, "unet7"). With the slack
// it wakes at most every few milliseconds: its duties (preempting a
// goroutine that ran 10 ms, polling the network after 10 ms, taking a P
// from a system call that blocks) are on that scale. Nothing of the
// child's data path waits on a timer: frames and the host's sockets wake
// it through the poller, which the slack does not delay; TCP's shortest
// timer there is the 200 ms retransmission.
const ChildTimerSlack = 5 * time.Millisecond

// TimerSlackEnv, in the VMM's environment, sets the child's timer slack
// in microseconds instead of ChildTimerSlack (50: Linux's default, as
// before): the benchmark's way to compare them.
const TimerSlackEnv = "TINYVMM_USERNET_TIMER_SLACK_US"

// childTimerSlack is the child's timer slack in ns.
func childTimerSlack() int64 {
	if v, err := strconv.ParseInt(os.Getenv(TimerSlackEnv), 10, 64); err == nil && v > 0 {
		return v * 1000
	}
	return ChildTimerSlack.Nanoseconds()
}

// Backend is the device's end of the link to a tinyvmm-usernet process.
// It implements virtionet.Backend and virtionet.MultiFramer.
type Backend struct {
	fd       int
	forwards []string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the child has been waited for
	waitErr  error         // its exit, once exited is closed

	ready     chan struct{} // closed when Ready succeeded
	closeOnce sync.Once
	closing   chan struct{}

	readyLine *os.File // the child's ReadyFd pipe, read by Ready
	want      int      // hostfwds the ready line must report
	readyOnce sync.Once
	readyErr  error
}

// TraceEnv, in tinyvmm-usernet's environment (tinyvmm passes its own
// on), names a file it writes a timeline of its NAT's and its link's
// events to (usernetd's trace): an instrument for finding where a
// connection's time goes. bench usernet's --trace-server notes the host
// side of the same connections on the same clock.
const TraceEnv = "TINYVMM_USERNET_TRACE"

// Find is the path of tinyvmm-usernet: next to the running executable
// (where make build puts both), else on PATH.
func Find() (string, error) {
	self, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(self), Program)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(Program); err == nil {
		return p, nil
	}
	where := "the running executable"
	if self != "" {
		where = self
	}
	return "", fmt.Errorf("%s not found next to %s or on PATH (make build puts it in bin/)", Program, where)
}

// Start runs tinyvmm-usernet for cfg and waits until it is ready: Launch,
// then Ready.
func Start(cfg Config, logf func(format string, args ...any)) (*Backend, error) {
	b, err := Launch(cfg, logf)
	if err != nil {
		return nil, err
	}
	if err := b.Ready(); err != nil {
		return nil, err
	}
	return b, nil
}

// Launch starts tinyvmm-usernet for cfg and returns without waiting for
// it, so that the child starts while the VMM sets up the rest of the VM:
// the device can be made on the Backend at once (its control messages
// wait in the link), and Ready, before the guest runs, waits for the
// child. logf, if not nil, is told when the child exits after Ready and
// before Close.
func Launch(cfg Config, logf func(format string, args ...any)) (*Backend, error) {
	if len(cfg.MAC) != 6 {
		return nil, fmt.Errorf("net user: the guest's MAC %v is not 6 bytes", cfg.MAC)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	prog, err := Find()
	if err != nil {
		return nil, fmt.Errorf("net user: %v", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("net user: socketpair: %v", err)
	}
	link := os.NewFile(uintptr(fds[1]), "usernet-link")
	defer link.Close() // the child has its copy
	// Without privilege it is capped at net.core.wmem_max.
	SetSendBuffer(fds[0], sockBuf)
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("net user: %v", err)
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("net user: %v", err)
	}

	cmd := exec.Command(prog, cfg.Args()...)
	cmd.ExtraFiles = []*os.File{link, wr} // LinkFd, ReadyFd
	cmd.Stderr = os.Stderr                // a panic's trace, should it come
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Dies with the thread that started it (kept alive below until
		// the child is gone); its own group keeps the terminal's ^C off.
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	b := &Backend{fd: fds[0], cmd: cmd, exited: make(chan struct{}), closing: make(chan struct{}), ready: make(chan struct{}),
		readyLine: rd, want: len(cfg.Forwards)}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the forking thread, not the process: this
		// goroutine holds that thread until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// The child takes its scheduling class from this thread, which
		// may have come from the VMM's slowed sysmon.
		sysmon.ResetThread()
		// The child's threads take their timer slack from this one
		// (fork and exec keep it): set it for the start only.
		old, slackErr := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
		if slackErr == nil {
			unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(childTimerSlack()), 0, 0, 0)
		}
		err := cmd.Start()
		if slackErr == nil {
			unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
		}
		if err != nil {
			started <- err
			close(b.exited)
			return
		}
		started <- nil
		b.waitErr = cmd.Wait()
		defer close(b.exited)
		if logf != nil && b.exitIsNews() {
			logf("net user: %s exited: %v", Program, b.waitErr)
		}
	}()
	err = <-started
	wr.Close()
	if err != nil {
		rd.Close()
		unix.Close(fds[0])
		return nil, fmt.Errorf("net user: %v", err)
	}
	return b, nil
}

// Ready waits until the child is ready: its hostfwd listeners are open (a
// busy port is an error here, before the guest boots). After an error the
// child is gone (Close). Forwards holds the listeners' addresses once it
// has returned nil; later calls return what the first did.
func (b *Backend) Ready() error {
	b.readyOnce.Do(func() {
		defer b.readyLine.Close()
		if b.readyErr = b.awaitReady(); b.readyErr != nil {
			b.Close()
			return
		}
		close(b.ready)
	})
	return b.readyErr
}

// awaitReady reads the child's ready line, waiting at most readyTimeout
// from now: a deadline set at Launch could pass while the VMM is still
// loading a large initrd, and a passed deadline fails the read even of a
// line that is there.
func (b *Backend) awaitReady() error {
	b.readyLine.SetReadDeadline(time.Now().Add(readyTimeout))
	line, rerr := bufio.NewReader(b.readyLine).ReadString('\n')
	if rerr != nil && line == "" && errors.Is(rerr, os.ErrDeadlineExceeded) {
		return fmt.Errorf("net user: %s was not ready after %v", Program, readyTimeout)
	}
	var exitErr error
	if line == "" {
		select { // its exit status says more than the pipe's end
		case <-b.exited:
			exitErr = b.waitErr
		case <-time.After(time.Second):
		}
	}
	forwards, err := parseReady(line)
	if err != nil && exitErr != nil {
		err = fmt.Errorf("%v (%v)", err, exitErr)
	}
	if err != nil {
		// usernet's errors say "net user:" already.
		return fmt.Errorf("net user: %s", strings.TrimPrefix(err.Error(), "net user: "))
	}
	if len(forwards) != b.want {
		return fmt.Errorf("net user: %s reported %d forwards for %d", Program, len(forwards), b.want)
	}
	b.forwards = forwards
	return nil
}

// exitIsNews says whether the child's exit, just waited for, should be
// logged: only an exit while the guest runs. Close kills the child after
// closing closing, and Start reports an exit before ready itself. closing
// is checked first and alone: once Close has run, ready may be closed as
// well, and a select over both would pick either at random.
func (b *Backend) exitIsNews() bool {
	select {
	case <-b.closing:
		return false
	default:
	}
	select {
	case <-b.ready:
		return true
	default:
		return false
	}
}

// Name implements virtionet.Backend.
func (b *Backend) Name() string { return "user" }

// Fd implements virtionet.Backend.
func (b *Backend) Fd() int { return b.fd }

// Offloads implements virtionet.Backend: checksum and IPv4 TSO (see
// Offloads in userproc.go).
func (b *Backend) Offloads() uint { return Offloads }

// MultiFrame implements virtionet.MultiFramer: the device moves batches
// of frames with sendmmsg and recvmmsg.
func (b *Backend) MultiFrame() bool { return true }

// SetVnetHdrSize implements virtionet.Backend: it tells the child, in
// line with the frames, how long the header in front of them is.
func (b *Backend) SetVnetHdrSize(n int) error {
	if n < 0 || n > 12 {
		return fmt.Errorf("net user: vnet header of %d bytes", n)
	}
	return b.control(HdrSizeMsg, byte(n), "the header size")
}

// control sends the child one of the link's control messages.
func (b *Backend) control(kind, val byte, what string) error {
	msg := []byte{kind, val}
	deadline := time.Now().Add(time.Second)
	for {
		err := unix.Send(b.fd, msg, unix.MSG_DONTWAIT)
		if err == nil {
			return nil
		}
		if err != unix.EAGAIN || time.Now().After(deadline) {
			return fmt.Errorf("net user: telling %s %s: %v", Program, what, err)
		}
		time.Sleep(time.Millisecond) // the child is behind on a burst
	}
}

// SetOffload implements virtionet.Backend: any subset of what was offered
// will do; the child hears which (OffloadMsg), and sends the guest TSO
// super-frames with partial checksums only if it takes them.
func (b *Backend) SetOffload(flags uint) error {
	if flags&^Offloads != 0 {
		return fmt.Errorf("net user: offloads %#x were never offered", flags&^Offloads)
	}
	return b.control(OffloadMsg, byte(flags), "the guest's offloads")
}

// Forwards returns the host address each hostfwd listens on, in order,
// once Ready has returned nil.
func (b *Backend) Forwards() []string { return b.forwards }

// Pid is the child's process id.
func (b *Backend) Pid() int { return b.cmd.Process.Pid }

// Close ends the child (SIGKILL: it holds no state worth saving) and waits
// for it, then closes the device's end.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		close(b.closing)
		select {
		case <-b.exited:
		default:
			b.cmd.Process.Kill()
			<-b.exited
		}
		b.readyLine.Close() // if Ready never read it
		err = unix.Close(b.fd)
	})
	return err
}
