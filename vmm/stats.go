package vmm

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"tinyvmm/virtiofs"
)

// RunStats is what --stats reports about one run.
type RunStats struct {
	// FirstOutputMs is the time from start to the guest's first console
	// byte; -1 when it printed nothing.
	FirstOutputMs float64 `json:"first_output_ms"`
	// ExitMs is the time from start to the guest's stop.
	ExitMs float64           `json:"exit_ms"`
	PVM    bool              `json:"pvm"`
	Exits  map[string]uint64 `json:"vcpu_exits"`
	Nets   []any             `json:"nets,omitempty"`
	Shares []virtiofs.Stats  `json:"shares,omitempty"`
	Boot   *BootStats        `json:"boot,omitempty"`
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// text is the human form: one line of timings and exits, then each
// device's own report.
func (s RunStats) text(netText []string) string {
	var b strings.Builder
	first := "no console output"
	if s.FirstOutputMs >= 0 {
		first = fmt.Sprintf("first console output after %.1f ms", s.FirstOutputMs)
	}
	fmt.Fprintf(&b, "tinyvmm stats: %s, stopped after %.1f ms", first, s.ExitMs)
	if bs := s.Boot; bs != nil && bs.FirstRunUnixNs != 0 {
		fmt.Fprintf(&b, "; first KVM_RUN after %.1f ms", millis(time.Duration(bs.FirstRunUnixNs-bs.ProcessUnixNs)))
		if bs.InitUnixNs != 0 {
			fmt.Fprintf(&b, ", /init after %.1f ms", millis(time.Duration(bs.InitUnixNs-bs.ProcessUnixNs)))
		}
		b.WriteString(" (from package init)")
		if len(bs.SetupMs) > 0 {
			b.WriteString("; set-up ms:")
			for _, st := range bs.SetupMs {
				fmt.Fprintf(&b, " %s %.1f,", st.Step, st.Ms)
			}
		}
		if bs.PeakRSSKiBAtRun > 0 {
			fmt.Fprintf(&b, " peak RSS %.1f MiB of which guest RAM %.1f MiB", float64(bs.PeakRSSKiBAtRun)/1024, float64(bs.GuestTouchedKiBAtRun)/1024)
		}
	}
	names := make([]string, 0, len(s.Exits))
	for n := range s.Exits {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 0 {
		b.WriteString("; vCPU exits:")
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%d", strings.TrimPrefix(n, "KVM_EXIT_"), s.Exits[n])
		}
	}
	b.WriteString("\n")
	for _, t := range netText {
		b.WriteString(t)
		if !strings.HasSuffix(t, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// report writes the stats where Config.Stats says: "-" as text on log,
// otherwise JSON to that file.
func (s RunStats) report(target string, log io.Writer, netText []string) error {
	if target == "-" {
		_, err := io.WriteString(log, s.text(netText))
		return err
	}
	j, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("stats: %v", err)
	}
	if err := os.WriteFile(target, append(j, '\n'), 0o644); err != nil {
		return fmt.Errorf("cannot write stats to %s: %v", target, err)
	}
	return nil
}
