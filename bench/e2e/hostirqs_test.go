package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostIRQsOnVCPUsCPU(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := write("before", "           CPU0       CPU1\n"+
		" 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n"+
		"LOC:        100        200   Local timer interrupts\n"+
		"RES:         10         20   Rescheduling interrupts\n"+
		"TLB:          5          5   TLB shootdowns\n")
	after := write("after", "           CPU0       CPU1\n"+
		" 24:          9          0  IO-APIC   5-edge      ACPI:Ged\n"+
		"LOC:        150        290   Local timer interrupts\n"+
		"RES:         11         70   Rescheduling interrupts\n"+
		"TLB:          5          8   TLB shootdowns\n")
	b, err := readHostIRQs(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := readHostIRQs(after)
	if err != nil {
		t.Fatal(err)
	}
	// Thread 11 has the most guest time (field 43) and last ran on CPU 1
	// (field 39); its comm has a space and a paren, as QEMU's "CPU 0/KVM" has spaces.
	stat := func(cpu, guest string) string {
		f := make([]string, 44)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[1], f[2] = "11", "(CPU 0/KVM) x)", "R"
		f[38], f[42] = cpu, guest
		return strings.Join(f, " ") + "\n"
	}
	write("proc/7/task/10/stat", stat("0", "3"))
	write("proc/7/task/11/stat", stat("1", "500"))
	cpu, err := vcpuCPU(filepath.Join(dir, "proc"), 7)
	if err != nil || cpu != 1 {
		t.Fatalf("vcpuCPU = %d, %v; want 1", cpu, err)
	}
	d := a.onCPU(b, cpu)
	want := map[string]uint64{"LOC": 90, "RES": 50, "TLB": 3}
	if len(d) != len(want) {
		t.Fatalf("onCPU = %v, want %v", d, want)
	}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("%s = %d, want %d", k, d[k], v)
		}
	}
}
