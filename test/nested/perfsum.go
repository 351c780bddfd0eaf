package nested

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// PerfReportArgs are perf report's flags for Plan.Perf: one line per
// thread name, object and symbol, fields apart by commas, no colours,
// down to a few samples (kernel samples come one line per address: L1
// has no kallsyms, so perf cannot name them; SummarizePerf does).
const PerfReportArgs = "--stdio --stdio-color=never --no-children --sort comm,dso,sym -g none -t , --percent-limit 0.002"

// KernelSymbols names kernel text addresses from a vmlinux's symbol table.
type KernelSymbols struct {
	addrs []uint64
	names []string
}

// ReadKernelSymbols reads the function symbols of vmlinux.
func ReadKernelSymbols(vmlinux string) (*KernelSymbols, error) {
	f, err := elf.Open(vmlinux)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", vmlinux, err)
	}
	var ks KernelSymbols
	sort.Slice(syms, func(i, j int) bool { return syms[i].Value < syms[j].Value })
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Name != "" {
			ks.addrs, ks.names = append(ks.addrs, s.Value), append(ks.names, s.Name)
		}
	}
	if len(ks.addrs) == 0 {
		return nil, fmt.Errorf("%s has no function symbols", vmlinux)
	}
	return &ks, nil
}

// Name is the function that holds addr, or the address itself when it
// lies below every function.
func (ks *KernelSymbols) Name(addr uint64) string {
	i := sort.Search(len(ks.addrs), func(i int) bool { return ks.addrs[i] > addr }) - 1
	if i < 0 {
		return fmt.Sprintf("%#x", addr)
	}
	return ks.names[i]
}

// SummarizePerf reads perf report's lines (PerfReportArgs), names kernel
// addresses with ks, adds up what then has one name, and writes each
// thread name's share of all samples and the top symbols.
func SummarizePerf(r io.Reader, ks *KernelSymbols, top int, w io.Writer) error {
	type key struct{ comm, sym string }
	bySym, byComm := map[key]float64{}, map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.SplitN(line, ",", 4) // each field padded to its column
		if len(f) != 4 {
			continue // perf's warnings
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if !strings.HasSuffix(f[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		sym := f[3]
		if a, ok := strings.CutPrefix(sym, "[k] 0x"); ok {
			if addr, err := strconv.ParseUint(a, 16, 64); err == nil {
				sym = "[k] " + ks.Name(addr)
			}
		}
		bySym[key{f[1], sym}] += pct
		byComm[f[1]] += pct
		lines++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if lines == 0 {
		return fmt.Errorf("no perf report lines")
	}
	comms := make([]string, 0, len(byComm))
	for c := range byComm {
		comms = append(comms, c)
	}
	sort.Slice(comms, func(i, j int) bool { return byComm[comms[i]] > byComm[comms[j]] })
	fmt.Fprintln(w, "threads by name, % of all samples on every L1 CPU:")
	for _, c := range comms {
		fmt.Fprintf(w, "  %6.2f%%  %s\n", byComm[c], c)
	}
	keys := make([]key, 0, len(bySym))
	for k := range bySym {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if bySym[keys[i]] != bySym[keys[j]] {
			return bySym[keys[i]] > bySym[keys[j]]
		}
		return keys[i].comm+keys[i].sym < keys[j].comm+keys[j].sym
	})
	fmt.Fprintf(w, "top %d symbols ([k] kernel, [.] user space), %% of all samples:\n", min(top, len(keys)))
	for _, k := range keys[:min(top, len(keys))] {
		fmt.Fprintf(w, "  %6.2f%%  %-16s %s\n", bySym[k], k.comm, k.sym)
	}
	return nil
}
