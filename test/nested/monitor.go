package nested

import (
	"bytes"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// hmp is a client of QEMU's human monitor on a unix socket, kept open for
// the whole boot: one command at a time, its answer read up to the next
// prompt.
type hmp struct {
	c   net.Conn
	buf []byte
}

const hmpPrompt = "(qemu) "

// dialHMP connects and reads the monitor's banner.
func dialHMP(sock string, timeout time.Duration) (*hmp, error) {
	c, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return nil, err
	}
	h := &hmp{c: c}
	if _, err := h.readPrompt(timeout); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor banner: %w", err)
	}
	return h, nil
}

func (h *hmp) Close() error { return h.c.Close() }

// readPrompt reads until the monitor prints its prompt and returns what
// came before it, without terminal escapes and carriage returns.
func (h *hmp) readPrompt(timeout time.Duration) (string, error) {
	h.c.SetReadDeadline(time.Now().Add(timeout))
	h.buf = h.buf[:0]
	chunk := make([]byte, 64<<10)
	for !bytes.HasSuffix(h.buf, []byte(hmpPrompt)) {
		if len(h.buf) > 4<<20 {
			return "", fmt.Errorf("monitor answer over 4 MiB")
		}
		n, err := h.c.Read(chunk)
		h.buf = append(h.buf, chunk[:n]...)
		if err != nil {
			return "", err
		}
	}
	out := strings.TrimSuffix(string(h.buf), hmpPrompt)
	return ansiEscape.ReplaceAllString(strings.ReplaceAll(out, "\r", ""), ""), nil
}

// do runs one command and returns its answer (the echoed command line
// taken off).
func (h *hmp) do(cmd string, timeout time.Duration) (string, error) {
	h.c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := h.c.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	out, err := h.readPrompt(timeout)
	if err != nil {
		return "", err
	}
	if _, rest, ok := strings.Cut(out, "\n"); ok {
		return rest, nil
	}
	return "", nil
}

// lapicState is what `info lapic` shows of one CPU's local APIC that
// matters for a lost interrupt: the vectors requested and the processor
// priority.
type lapicState struct {
	Enabled bool
	IRR     []int
	PPR     int
	// TimerVec is the APIC timer's vector (LVTT), -1 when not shown;
	// TimerInitial and TimerCurrent its counts (HaveTimer when shown). A
	// one-shot timer whose interrupt was lost reads current 0 with the
	// same initial count read after read: nobody programmed it again.
	TimerVec                   int
	HaveTimer                  bool
	TimerInitial, TimerCurrent uint64
}

var (
	pprField   = regexp.MustCompile(`\bPPR 0x([0-9a-fA-F]+)`)
	lvtVec     = regexp.MustCompile(`\(vec (\d+)\)`)
	timerCount = regexp.MustCompile(`initial_count = (\d+) current_count = (\d+)`)
)

// parseLapic reads `info lapic` output; ok is false when it has no IRR or
// PPR (no such CPU, or not an x86 APIC dump).
func parseLapic(s string) (st lapicState, ok bool) {
	var sawIRR bool
	st.TimerVec = -1
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "LVTT":
			if m := lvtVec.FindStringSubmatch(line); m != nil {
				st.TimerVec, _ = strconv.Atoi(m[1])
			}
		case len(f) > 0 && f[0] == "Timer":
			if m := timerCount.FindStringSubmatch(line); m != nil {
				init, err1 := strconv.ParseUint(m[1], 10, 32)
				cur, err2 := strconv.ParseUint(m[2], 10, 32)
				st.HaveTimer = err1 == nil && err2 == nil
				st.TimerInitial, st.TimerCurrent = init, cur
			}
		case len(f) > 0 && f[0] == "SPIV":
			st.Enabled = strings.Contains(line, "APIC enabled")
		case len(f) > 0 && f[0] == "IRR":
			sawIRR = true
			for _, v := range f[1:] {
				if n, err := strconv.Atoi(strings.TrimSuffix(v, "(level)")); err == nil {
					st.IRR = append(st.IRR, n)
				}
			}
		}
		if m := pprField.FindStringSubmatch(line); m != nil {
			n, err := strconv.ParseUint(m[1], 16, 8)
			if err != nil {
				return st, false
			}
			st.PPR = int(n)
			ok = sawIRR
		}
	}
	return st, ok
}

// Deliverable is the highest vector the APIC requests whose priority
// class is above the processor's, or -1: the local APIC must hand such a
// vector to its CPU as soon as the CPU accepts interrupts.
func (st lapicState) Deliverable() int {
	best := -1
	if !st.Enabled {
		return best
	}
	for _, v := range st.IRR {
		if v>>4 > st.PPR>>4 && v > best {
			best = v
		}
	}
	return best
}

// timerCountsDown says whether vec is the APIC timer's vector and the
// timer is counting down again: L1 took its last expiry and set the next,
// so the vector pending is a new expiry's, not a lost one.
func (st lapicState) timerCountsDown(vec int) bool {
	return st.HaveTimer && vec == st.TimerVec && st.TimerCurrent != 0
}
