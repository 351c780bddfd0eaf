package nested

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Kernel addresses are named after the function that holds them (here in
// perfsum's own symbol table, an ELF like vmlinux), what then has one name
// is added up, and each thread name gets its share.
func TestSummarizePerfNamesAndAddsUp(t *testing.T) {
	// go test strips its own binary: build perfsum, with its symbols.
	exe := filepath.Join(t.TempDir(), "perfsum")
	if out, err := exec.Command("go", "build", "-o", exe, "./cmd/perfsum").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ks, err := ReadKernelSymbols(exe)
	if err != nil {
		t.Fatal(err)
	}
	const name = "tinyvmm/test/nested.SummarizePerf"
	fn := symbolAddr(t, exe, name)
	if got := ks.Name(fn + 4); got != name {
		t.Fatalf("Name(%#x+4) = %q, want %q", fn, got, name)
	}
	report := fmt.Sprintf(`# To display the perf.data header info, please use --header/--header-only options.
Warning:
Kernel address maps (/proc/{kallsyms,modules}) were restricted.
#
# Overhead,Command        ,Shared Object       ,Symbol
 30.00%% ,swapper        ,[unknown]           ,[k] %#x
 1.00%%  ,net-tap0       ,[unknown]           ,[k] %#x
 0.50%%  ,net-tap0       ,[unknown]           ,[k] %#x
 0.25%%  ,CPU 0/KVM      ,qemu-system-x86     ,[.] kvm_cpu_exec
`, fn, fn+4, fn+8)
	var out bytes.Buffer
	if err := SummarizePerf(strings.NewReader(report), ks, 10, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"   30.00%  swapper\n", "    1.50%  net-tap0\n", "    0.25%  CPU 0/KVM\n",
		"    1.50%  net-tap0         [k] " + name + "\n",
		"    0.25%  CPU 0/KVM        [.] kvm_cpu_exec\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
	if err := SummarizePerf(strings.NewReader("Warning:\n"), ks, 10, &out); err == nil {
		t.Error("a report without lines: no error")
	}
}

// symbolAddr is where the ELF file exe has symbol name.
func symbolAddr(t *testing.T, exe, name string) uint64 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s has no symbol %s", exe, name)
	return 0
}
