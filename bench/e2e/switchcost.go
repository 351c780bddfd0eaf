package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// SwitchCost is what one CPU takes for a one-byte pipe round trip between
// two threads of one process and between two processes: the difference is
// two address-space switches. On hardware with PCID it is a fraction of a
// microsecond; in a nested L1 under TCG each switch flushes the emulator's
// TLB and costs about what a VM exit does. A user-space device's worker
// woken by another process on its CPU pays one such switch, vhost's kernel
// thread (which borrows the address space it finds) none, so the report
// carries it beside the latency cells.
type SwitchCost struct {
	CPU       int     `json:"cpu"`
	Threads   float64 `json:"threads_us"`
	Processes float64 `json:"processes_us"`
}

func (s SwitchCost) String() string {
	return fmt.Sprintf("a pipe round trip on CPU %d: %.1f us between two threads, %.1f us between two processes (+%.1f us per address-space switch)",
		s.CPU, s.Threads, s.Processes, (s.Processes-s.Threads)/2)
}

const switchTrips = 1000

// MeasureSwitchCost times switchTrips round trips each way on the first
// CPU this process may use; helper is the program whose `bench e2e
// switchecho` answers from another process (this one, as the lab).
func MeasureSwitchCost(helper string) (SwitchCost, error) {
	cpu, err := firstCPU()
	if err != nil {
		return SwitchCost{}, err
	}
	s := SwitchCost{CPU: cpu}
	errc := make(chan error, 1)
	go func() {
		// A thread of its own, so that its CPU mask dies with it.
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var err error
		if s.Threads, err = threadTrips(s.CPU); err == nil {
			s.Processes, err = processTrips(helper, s.CPU)
		}
		errc <- err
	}()
	return s, <-errc
}

func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

// readByte reads one byte; an end of file is an error, the other side
// gone.
func readByte(fd int, b []byte) error {
	n, err := unix.Read(fd, b)
	if err == nil && n == 0 {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// echo answers n one-byte messages on r with one on w.
func echo(r, w, n int) error {
	b := make([]byte, 1)
	for i := 0; i < n; i++ {
		if err := readByte(r, b); err != nil {
			return err
		}
		if _, err := unix.Write(w, b); err != nil {
			return err
		}
	}
	return nil
}

// trips sends n one-byte messages on w, each after the answer to the last
// one on r, and returns the microseconds per round trip.
func trips(r, w, n int) (float64, error) {
	b := make([]byte, 1)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := unix.Write(w, b); err != nil {
			return 0, err
		}
		if err := readByte(r, b); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(start).Nanoseconds()) / 1e3 / float64(n), nil
}

// pipes makes the two pipes of a round trip: there and back.
func pipes() (there, back [2]int, err error) {
	if err = unix.Pipe2(there[:], unix.O_CLOEXEC); err != nil {
		return
	}
	if err = unix.Pipe2(back[:], unix.O_CLOEXEC); err != nil {
		unix.Close(there[0])
		unix.Close(there[1])
	}
	return
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func threadTrips(cpu int) (float64, error) {
	there, back, err := pipes()
	if err != nil {
		return 0, err
	}
	defer closeAll(there[0], there[1], back[0], back[1])
	if err := pinThread(cpu); err != nil {
		return 0, err
	}
	echoed := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := pinThread(cpu); err != nil {
			unix.Close(back[1]) // the driver's read ends
			echoed <- err
			return
		}
		echoed <- echo(there[0], back[1], switchTrips)
	}()
	us, err := trips(back[0], there[1], switchTrips)
	return us, errors.Join(err, <-echoed)
}

func processTrips(helper string, cpu int) (float64, error) {
	there, back, err := pipes()
	if err != nil {
		return 0, err
	}
	defer closeAll(there[1], back[0])
	// The child's ends, closed here once it has them.
	theirs := []*os.File{os.NewFile(uintptr(there[0]), "there"), os.NewFile(uintptr(back[1]), "back")}
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	if err := pinThread(cpu); err != nil {
		return 0, err
	}
	cmd := exec.Command(helper, "bench", "e2e", "switchecho", strconv.Itoa(cpu), strconv.Itoa(switchTrips))
	cmd.ExtraFiles = theirs
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start the switch echo: %w", err)
	}
	for _, f := range theirs {
		f.Close() // so that a dead child ends our read
	}
	us, err := trips(back[0], there[1], switchTrips)
	if err != nil {
		cmd.Process.Kill()
	}
	return us, errors.Join(err, cmd.Wait())
}

// MainSwitchEcho is `bench e2e switchecho CPU N`, the other process of
// MeasureSwitchCost: on CPU, it answers N messages from fd 3 on fd 4.
func MainSwitchEcho(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("bench e2e switchecho takes CPU and N, got %q", args)
	}
	cpu, err1 := strconv.Atoi(args[0])
	n, err2 := strconv.Atoi(args[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("bench e2e switchecho: %w", err)
	}
	runtime.LockOSThread()
	if err := pinThread(cpu); err != nil {
		return err
	}
	return echo(3, 4, n)
}
