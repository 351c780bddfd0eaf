package schedstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Thread is the scheduler's account of one thread, from the three files
// of its /proc/PID/task/TID directory.
type Thread struct {
	Name  string // status' Name: the kernel escapes control characters, so it is one line
	State string // stat's state letter: R, S, D, ...

	// Context switches (status): voluntary ones are sleeps, each ended by
	// a wakeup; involuntary ones are preemptions.
	Voluntary, Involuntary uint64

	// CPU time in clock ticks (stat, USER_HZ); UserTicks includes
	// GuestTicks, the time in a guest.
	UserTicks, SystemTicks, GuestTicks uint64
	CPU                                int // the CPU it last ran on (stat)
	Policy                             int // its scheduling policy (stat): unix.SCHED_IDLE, ...

	RunNs  uint64 // ns on a CPU (schedstat)
	WaitNs uint64 // ns runnable but waiting for a CPU (schedstat)
}

// ErrEnded is ReadThread's error when the thread's stat cannot be read:
// the thread ended, or never was.
var ErrEnded = errors.New("thread ended")

// ReadThread reads dir (/proc/PID/task/TID, or /proc/PID for a process's
// first thread). Callers differ in which files they cannot do without, so
// a file that cannot be read or parsed leaves only its own fields zero:
// the error then names it, and is ErrEnded only for stat. A thread that
// ends between two reads, or a kernel without schedstat, does that.
func ReadThread(dir string) (Thread, error) {
	var t Thread
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return t, fmt.Errorf("%w: %w", ErrEnded, err)
	}
	errs := []error{t.parseStat(b)}
	for _, f := range []struct {
		name  string
		parse func([]byte) error
	}{{"status", t.parseStatus}, {"schedstat", t.parseSchedstat}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err == nil {
			err = f.parse(b)
		}
		errs = append(errs, err)
	}
	return t, errors.Join(errs...)
}

// parseStat sets State, the ticks and CPU from a stat file, or nothing.
// comm, field 2, may hold spaces and parentheses: the fields counted
// here follow its last ')'.
func (t *Thread) parseStat(b []byte) error {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return fmt.Errorf("stat %.40q: no comm", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// field n of proc_pid_stat(5) is f[n-3]
	const state, utime, stime, processor, policy, guestTime = 3, 14, 15, 39, 41, 43
	if len(f) < guestTime-2 {
		return fmt.Errorf("stat: %d fields after comm, want %d", len(f), guestTime-2)
	}
	var n [5]uint64
	for j, field := range []int{utime, stime, processor, guestTime, policy} {
		v, err := strconv.ParseUint(f[field-3], 10, 64)
		if err != nil {
			return fmt.Errorf("stat field %d: %w", field, err)
		}
		n[j] = v
	}
	t.State = f[state-3]
	t.UserTicks, t.SystemTicks, t.CPU, t.GuestTicks, t.Policy = n[0], n[1], int(n[2]), n[3], int(n[4])
	return nil
}

// parseStatus sets Name and the context switches from a status file, or
// nothing.
func (t *Thread) parseStatus(b []byte) error {
	var name string
	var vol, invol uint64
	var have int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "Name":
			name = v
		case "voluntary_ctxt_switches":
			vol, err = strconv.ParseUint(v, 10, 64)
		case "nonvoluntary_ctxt_switches":
			invol, err = strconv.ParseUint(v, 10, 64)
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("status %s: %w", k, err)
		}
		have++
	}
	if have < 3 {
		return errors.New("status: no Name or context switches")
	}
	t.Name, t.Voluntary, t.Involuntary = name, vol, invol
	return nil
}

// parseSchedstat sets RunNs and WaitNs from a schedstat file ("run wait
// timeslices"), or nothing.
func (t *Thread) parseSchedstat(b []byte) error {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return fmt.Errorf("schedstat %.40q: want run and wait ns", b)
	}
	run, err1 := strconv.ParseUint(f[0], 10, 64)
	wait, err2 := strconv.ParseUint(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("schedstat: %w", err)
	}
	t.RunNs, t.WaitNs = run, wait
	return nil
}
