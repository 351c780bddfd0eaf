package bootbench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// What the benchmark reads from outside a VMM process: QEMU's trace log,
// QMP answers and /proc files. Each parser takes a reader, so the tests
// feed it text.

// lastTraceEvent returns the time of the last line of event in a QEMU log
// written with -msg timestamp=on ("PID@SEC.USEC:event ..."), at or before
// limit when limit is non-zero.
func lastTraceEvent(r io.Reader, event string, limit time.Time) (time.Time, bool) {
	var last time.Time
	found := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		at := strings.IndexByte(line, '@')
		colon := strings.IndexByte(line, ':')
		if at < 0 || colon < at {
			continue
		}
		name, _, _ := strings.Cut(line[colon+1:], " ")
		if name != event {
			continue
		}
		sec, usec, ok := strings.Cut(line[at+1:colon], ".")
		if !ok || len(usec) != 6 {
			continue
		}
		s, err1 := strconv.ParseInt(sec, 10, 64)
		u, err2 := strconv.ParseInt(usec, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		t := time.Unix(s, u*1000)
		if !limit.IsZero() && t.After(limit) {
			continue
		}
		last, found = t, true
	}
	return last, found
}

// qmp is a client of QEMU's machine protocol on one connection.
type qmp struct {
	dec *json.Decoder
	w   io.Writer
}

// newQMP reads the greeting and leaves capabilities negotiation mode.
func newQMP(rw io.ReadWriter) (*qmp, error) {
	q := &qmp{dec: json.NewDecoder(rw), w: rw}
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := q.dec.Decode(&greeting); err != nil || greeting.QMP == nil {
		return nil, fmt.Errorf("QMP: no greeting (%v)", err)
	}
	if _, err := q.call(`{"execute":"qmp_capabilities"}`); err != nil {
		return nil, err
	}
	return q, nil
}

// call sends one command and returns its "return" value; events that come
// first are skipped.
func (q *qmp) call(cmd string) (json.RawMessage, error) {
	if _, err := io.WriteString(q.w, cmd+"\n"); err != nil {
		return nil, fmt.Errorf("QMP: %w", err)
	}
	for {
		var m struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if err := q.dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("QMP: %w", err)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("QMP: %s", m.Error.Desc)
		}
		if m.Return != nil {
			return m.Return, nil
		}
	}
}

// vcpuStats is query-stats for the vCPUs (QEMU 7.1+), summed over them.
func (q *qmp) vcpuStats() (map[string]uint64, error) {
	ret, err := q.call(`{"execute":"query-stats","arguments":{"target":"vcpu"}}`)
	if err != nil {
		return nil, err
	}
	return sumQMPStats(ret)
}

// sumQMPStats adds up the scalar stats of every vCPU in a query-stats
// answer; histograms (lists) are left out.
func sumQMPStats(ret json.RawMessage) (map[string]uint64, error) {
	var results []struct {
		Provider string `json:"provider"`
		Stats    []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(ret, &results); err != nil {
		return nil, fmt.Errorf("QMP query-stats: %w", err)
	}
	sum := map[string]uint64{}
	for _, r := range results {
		if r.Provider != "kvm" {
			continue
		}
		for _, s := range r.Stats {
			if v, err := strconv.ParseUint(string(s.Value), 10, 64); err == nil {
				sum[s.Name] += v
			}
		}
	}
	if len(sum) == 0 {
		return nil, fmt.Errorf("QMP query-stats: no KVM vCPU counters")
	}
	return sum, nil
}

// statusKiB finds "NAME: N kB" in a /proc/PID/status.
func statusKiB(r io.Reader, name string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in the status file", name)
}

// guestRAMResidentKiB finds the guest RAM in a /proc/PID/smaps, the largest
// anonymous mapping of at least memKiB, and returns its Rss.
func guestRAMResidentKiB(r io.Reader, memKiB int64) (int64, error) {
	var bestSize, bestRss, size, rss int64 = -1, 0, 0, 0
	anon := false
	flush := func() {
		if anon && size >= memKiB && (bestSize < 0 || size < bestSize) {
			bestSize, bestRss = size, rss
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) >= 5 && bytes.IndexByte(f[0], '-') > 0 && !bytes.HasSuffix(f[0], []byte(":")) {
			flush() // a mapping header: "start-end perms offset dev inode [path]"
			anon = string(f[4]) == "0" && (len(f) == 5 || bytes.HasPrefix(f[5], []byte("[anon")))
			size, rss = 0, 0
			continue
		}
		if len(f) >= 2 {
			switch string(f[0]) {
			case "Size:":
				size, _ = strconv.ParseInt(string(f[1]), 10, 64)
			case "Rss:":
				rss, _ = strconv.ParseInt(string(f[1]), 10, 64)
			}
		}
	}
	flush()
	if bestSize < 0 {
		return 0, fmt.Errorf("no anonymous mapping of %d KiB or more (the guest RAM) in smaps", memKiB)
	}
	return bestRss, nil
}
