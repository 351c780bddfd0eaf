package nested

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/u-root/u-root/pkg/cpio"
)

func TestInitramfsHasParentsPlanAndLinks(t *testing.T) {
	var buf bytes.Buffer
	files := []File{
		{Dest: "/repo/kvm/kvm.test", Data: []byte("ELF"), Mode: 0o755},
		{Dest: "/bin/sh", Link: "busybox"},
	}
	if err := WriteInitramfs(&buf, files, []string{"kvmprobe", "cd /repo/kvm"}); err != nil {
		t.Fatal(err)
	}
	records, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(buf.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]cpio.Record{}
	var order []string
	for _, r := range records {
		byName[r.Name] = r
		order = append(order, r.Name)
	}
	for _, want := range []string{"dev/console", "plan", "bin", "repo", "repo/kvm", "repo/kvm/kvm.test", "bin/sh"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("initramfs lacks %q; has %v", want, order)
		}
	}
	if idx(order, "repo/kvm") > idx(order, "repo/kvm/kvm.test") {
		t.Errorf("directory comes after its file: %v", order)
	}
	plan, _ := io.ReadAll(io.NewSectionReader(byName["plan"], 0, int64(byName["plan"].FileSize)))
	if string(plan) != "kvmprobe\ncd /repo/kvm\n" {
		t.Errorf("plan = %q", plan)
	}
	if m := byName["repo/kvm/kvm.test"].Mode; m != cpio.S_IFREG|0o755 {
		t.Errorf("test binary mode = %o", m)
	}
	if m := byName["bin/sh"].Mode; m&cpio.S_IFMT != cpio.S_IFLNK {
		t.Errorf("bin/sh is not a symlink: mode %o", m)
	}
}

func TestInitramfsRejectsRelativeDestination(t *testing.T) {
	err := WriteInitramfs(io.Discard, []File{{Dest: "repo/x", Data: nil}}, nil)
	if err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("err = %v, want an absolute-path error", err)
	}
}

func idx(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func TestScanConsoleParsesMarkers(t *testing.T) {
	console := strings.Join([]string{
		"[    0.000000] Linux version 6.1",
		"l1init: kernel reached init after 3.20 s",
		"l1init: /dev/kvm present",
		"NESTED-STEP status=0 seconds=1.5 cmd=kvmprobe -exits 10",
		"NESTED-STEP status=3 seconds=20.0 cmd=./kvm.test -test.v",
		"NESTED-STEP garbage",
		"NESTED-EXIT 3\r",
	}, "\n")
	var out bytes.Buffer
	res, _, end := scanConsole(strings.NewReader(console), &out, nil, time.Now(), func() {})
	if end != endExit || res.Status != 3 || !res.KVM {
		t.Fatalf("end=%v status=%d kvm=%v", end, res.Status, res.KVM)
	}
	want := []Step{{"kvmprobe -exits 10", 0, 1.5}, {"./kvm.test -test.v", 3, 20}}
	if len(res.Steps) != 2 || res.Steps[0] != want[0] || res.Steps[1] != want[1] {
		t.Fatalf("steps = %+v, want %+v", res.Steps, want)
	}
	if !strings.Contains(out.String(), "Linux version") {
		t.Errorf("console not copied to output")
	}
}

// With Log set, Boot asks l1init to mark its steps' lines (MarkParam) and
// Output gets only those lines, the marker taken off, even one that looks
// like a kernel message (a guest's dmesg): not L1's boot, not the gate
// (kvmprobe), not L1's kernel messages in the middle of a step, not the
// markers. The log gets all of it.
func TestLogKeepsL1OutOfTheOutput(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "qemu")
	body := `#!/bin/sh
echo "qemu args: $*"
echo '[    0.000000] Linux version 6.1'
echo 'l1init: kernel reached init after 3.20 s'
echo 'l1init: /dev/kvm present'
echo 'kvmprobe: 10000 exits'
echo 'NESTED-STEP status=0 seconds=1.5 cmd=kvmprobe -exits 10000'
echo 'NESTED-OUT 2 packets transmitted, 2 received'
echo '[   12.345678] tap0: entered promiscuous mode'
echo 'NESTED-OUT [    0.000000] BIOS-e820: [mem 0x0-0x9fbff] usable'
echo 'NESTED-OUT NESTED-EXIT 7'
echo 'NESTED-STEP status=0 seconds=4.0 cmd=/repo/tinyvmm run -- sh -c ping'
echo 'l1init: IRQ 0 (the PIT) taken 1200 times'
echo 'NESTED-EXIT 0'
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	old := qemuBinary
	qemuBinary = script
	t.Cleanup(func() { qemuBinary = old })
	var out, log bytes.Buffer
	res, err := Boot(context.Background(), Machine{Kernel: "k", Initramfs: "i", Output: &out, Log: &log})
	if err != nil || res.Status != 0 || len(res.Steps) != 2 {
		t.Fatalf("Boot: %+v, %v", res, err)
	}
	want := "2 packets transmitted, 2 received\n[    0.000000] BIOS-e820: [mem 0x0-0x9fbff] usable\nNESTED-EXIT 7\n"
	if got := out.String(); got != want {
		t.Errorf("output %q, want only the step's %q", got, want)
	}
	for _, want := range []string{MarkParam, "Linux version", "kvmprobe: 10000 exits", "promiscuous", "\nNESTED-EXIT 7\n", "BIOS-e820", "NESTED-EXIT 0"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), OutMarker) {
		t.Errorf("log keeps the step marker:\n%s", log.String())
	}
	// Without Log, Output gets the whole console, as before, and L1 is
	// not asked to mark its steps.
	out.Reset()
	if _, err := Boot(context.Background(), Machine{Kernel: "k", Initramfs: "i", Output: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Linux version") || !strings.Contains(out.String(), "NESTED-EXIT 0") || strings.Contains(out.String(), MarkParam) {
		t.Errorf("without Log, output lacks the console or has %s:\n%s", MarkParam, out.String())
	}
}

// l1init (package main, not importable) and the runner agree on the
// marker and the parameter.
func TestL1InitMarksAsTheRunnerReads(t *testing.T) {
	src, err := os.ReadFile("l1init/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"const OutMarker = \"" + OutMarker + "\"", "const MarkParam = \"" + MarkParam + "\""} {
		if !strings.Contains(string(src), want) {
			t.Errorf("l1init/main.go lacks %s", want)
		}
	}
}

func TestScanConsoleWithoutExitMarker(t *testing.T) {
	res, tail, end := scanConsole(strings.NewReader("Kernel panic - not syncing\n"), io.Discard, nil, time.Now(), func() {})
	if end != endNone || res.Status != 0 || !strings.Contains(tail, "Kernel panic") {
		t.Fatalf("end=%v status=%d tail=%q", end, res.Status, tail)
	}
}

func TestScanConsoleRetryMarker(t *testing.T) {
	console := "NESTED-STEP status=1 seconds=30.0 cmd=kvmprobe -exits 10\nNESTED-RETRY\n"
	if _, _, end := scanConsole(strings.NewReader(console), io.Discard, nil, time.Now(), func() {}); end != endRetry {
		t.Fatalf("end = %v, want endRetry", end)
	}
}

func TestCPUInfoMHz(t *testing.T) {
	for in, want := range map[string]int{
		"processor\t: 0\ncpu MHz\t\t: 2096.024\ncpu MHz\t\t: 1.0\n": 2096024,
		"cpu MHz : junk\n": 0,
		"no such line\n":   0,
	} {
		if got := cpuinfoMHz(bufio.NewScanner(strings.NewReader(in))); got != want {
			t.Errorf("cpuinfoMHz(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestMissingNamesAKernelWithoutKVM(t *testing.T) {
	if _, err := exec.LookPath(QEMUBinary); err != nil {
		t.Skip(QEMUBinary + " not installed")
	}
	dir := t.TempDir()
	kernel := filepath.Join(dir, "bzImage")
	if why := Missing("", kernel); !strings.Contains(why, "make guest") {
		t.Errorf("no kernel: Missing = %q", why)
	}
	os.WriteFile(kernel, []byte("kernel"), 0o644)
	os.WriteFile(filepath.Join(dir, "kernel.config"), []byte("CONFIG_64BIT=y\n# CONFIG_KVM_AMD is not set\n"), 0o644)
	if why := Missing("", kernel); !strings.Contains(why, "without KVM_AMD") {
		t.Errorf("kernel without KVM: Missing = %q", why)
	}
	os.WriteFile(filepath.Join(dir, "kernel.config"), []byte("CONFIG_64BIT=y\nCONFIG_KVM_AMD=y\n"), 0o644)
	if why := Missing("", kernel); why != "" {
		t.Errorf("kernel with KVM: Missing = %q", why)
	}
}

// A boot whose console goes silent for Stall is killed, once: the run
// fails with the freeze, and L1 is not booted again.
func TestFrozenL1IsAnError(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "boots")
	script := filepath.Join(dir, "qemu")
	body := "#!/bin/sh\necho boot >>" + count + "\necho l1init: kernel reached init\nexec sleep 30\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	old := qemuBinary
	qemuBinary = script
	t.Cleanup(func() { qemuBinary = old })
	m := Machine{Kernel: "k", Initramfs: "i", Stall: 300 * time.Millisecond, Output: io.Discard}
	start := time.Now()
	_, err := Boot(context.Background(), m)
	if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "no console line for 300ms") {
		t.Fatalf("Boot: %v; want a freeze error", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the frozen boot took %v: the watchdog did not kill it", d)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "boot") != 1 {
		t.Errorf("QEMU started %d times, want once", strings.Count(string(b), "boot"))
	}
}

// A failed gate (kvmprobe) ends the run with an error, without a second boot.
func TestFailedGateIsAnError(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "boots")
	script := filepath.Join(dir, "qemu")
	body := "#!/bin/sh\necho boot >>" + count + "\necho l1init: /dev/kvm present\n" +
		"echo NESTED-STEP status=1 seconds=30.0 cmd=kvmprobe\necho NESTED-RETRY\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	old := qemuBinary
	qemuBinary = script
	t.Cleanup(func() { qemuBinary = old })
	_, err := Boot(context.Background(), Machine{Kernel: "k", Initramfs: "i", Output: io.Discard})
	if !errors.Is(err, errGate) {
		t.Fatalf("Boot: %v; want the gate's error", err)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "boot") != 1 {
		t.Errorf("QEMU started %d times, want once", strings.Count(string(b), "boot"))
	}
}

// monitorDump answers from a real QEMU's monitor (what a frozen L1's
// report shows), and says so when there is no monitor.
func TestMonitorDumpAsksQEMU(t *testing.T) {
	if _, err := exec.LookPath(QEMUBinary); err != nil {
		t.Skip(QEMUBinary + " not installed")
	}
	sock := filepath.Join(t.TempDir(), "mon.sock")
	if got := monitorDump(sock, freezeQueries); !strings.HasPrefix(got, "no monitor") {
		t.Errorf("no socket: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, QEMUBinary, "-M", "q35", "-S", "-nodefaults", "-display", "none",
		"-monitor", "unix:"+sock+",server=on,wait=off")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	got := monitorDump(sock, freezeQueries)
	for i := 0; i < 100 && strings.HasPrefix(got, "no monitor"); i++ { // QEMU still starting
		time.Sleep(100 * time.Millisecond)
		got = monitorDump(sock, freezeQueries)
	}
	for _, want := range []string{"CPU#0", "EIP=0000fff0", "HLT=0", "info lapic"} {
		if !strings.Contains(got, want) {
			t.Errorf("dump lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("dump has escape sequences: %q", got)
	}
}

func TestFreezeSummary(t *testing.T) {
	dump := "CPU#0\nRIP=ffffffff812b70c3 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\nIRR\t 236 \nISR\t (none)\n"
	if got, want := freezeSummary(dump), "CPU#0 HLT=1 IRR 236"; got != want {
		t.Errorf("freezeSummary = %q, want %q", got, want)
	}
}

// With perf the tinyvmm step runs under perf record, and the report (or,
// recording switches, the record) follows between the markers
// bench/nested.sh cuts it out by; without, the step is the command line
// alone.
func TestTinyvmmLinesUnderPerf(t *testing.T) {
	args := []string{"bench", "e2e", "--runs", "3"}
	if got := tinyvmmLines("tinyvmm-lab", args, noPerf); !slices.Equal(got, []string{"/repo/tinyvmm-lab bench e2e --runs 3"}) {
		t.Errorf("without perf: %q", got)
	}
	sw := tinyvmmLines("tinyvmm-lab", args, perfSwitches)
	if want := []string{
		"/bin/perf " + SwitchRecordArgs + " -o " + PerfData + " /repo/tinyvmm-lab bench e2e --runs 3",
		"busybox gzip -f " + PerfData, "busybox echo NESTED-SWITCHES-BEGIN",
		"busybox base64 " + PerfData + ".gz", "busybox echo NESTED-SWITCHES-END",
	}; !slices.Equal(sw, want) {
		t.Errorf("recording switches: %q\nwant %q", sw, want)
	}
	got := tinyvmmLines("tinyvmm-lab", args, perfProfile)
	if len(got) != 4 || !strings.HasPrefix(got[0], "/bin/perf record -a ") || !strings.HasSuffix(got[0], " -o "+PerfData+" /repo/tinyvmm-lab bench e2e --runs 3") {
		t.Fatalf("with perf, the first line %q: want the command under perf record", got[0])
	}
	if got[1] != "busybox echo NESTED-PERF-BEGIN" || got[3] != "busybox echo NESTED-PERF-END" ||
		got[2] != "/bin/perf report -i "+PerfData+" "+PerfReportArgs {
		t.Errorf("with perf, the report lines: %q", got[1:])
	}
}

// With Lab, L1 gets tinyvmm-lab beside tinyvmm (the lab's benchmarks run
// that tinyvmm) and the plan runs the command line with the lab; without,
// with tinyvmm. Builds the binaries: skipped with -short.
func TestAssemblePutsTheLabBesideTinyvmm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tinyvmm, the lab and L1's tools")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, lab := range []bool{true, false} {
		files, plan, err := Assemble(context.Background(), repo, t.TempDir(),
			Plan{Tinyvmm: []string{"bench", "e2e", "--runs", "1"}, Lab: lab}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		dests := map[string]File{}
		for _, f := range files {
			dests[f.Dest] = f
		}
		for _, d := range []string{"/repo/tinyvmm", "/repo/tinyvmm-lab", "/repo/bin/tinyvmm", "/repo/bin/tinyvmm-lab", "/bin/tinyvmm-lab"} {
			if _, ok := dests[d]; !ok {
				t.Errorf("lab=%v: L1 has no %s", lab, d)
			}
		}
		if f := dests["/repo/tinyvmm-lab"]; f.Src == "" || f.Mode&0o111 == 0 {
			t.Errorf("lab=%v: /repo/tinyvmm-lab is %+v, want an executable built here", lab, f)
		}
		want := "/repo/tinyvmm bench e2e --runs 1"
		if lab {
			want = "/repo/tinyvmm-lab bench e2e --runs 1"
		}
		if !slices.Contains(plan, want) {
			t.Errorf("lab=%v: plan %q lacks %q", lab, plan, want)
		}
	}
}

// A step whose words hold spaces or quotes reaches L1 as the same words:
// PlanLine writes JSON then, which l1init reads back (its planWords).
func TestPlanLineKeepsWords(t *testing.T) {
	if got := PlanLine([]string{"/repo/tinyvmm", "run", "--", "true"}); got != "/repo/tinyvmm run -- true" {
		t.Errorf("plain words: %q", got)
	}
	words := []string{"/repo/tinyvmm", "run", "--", "sh", "-c", "ping -c 2 10.0.2.1 && echo '# done'"}
	line := PlanLine(words)
	var back []string
	if err := json.Unmarshal([]byte(line), &back); err != nil || !slices.Equal(back, words) {
		t.Errorf("PlanLine(%q) = %q, read back as %q, %v", words, line, back, err)
	}
}

// Plan.Files go into L1's /files (a directory with what is under it, a
// file as it is), and the command line and -run steps run there. Builds
// L1's tools: skipped with -short.
func TestAssembleBringsFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tinyvmm and L1's tools")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	os.MkdirAll(filepath.Join(host, "dir", "sub"), 0o755)
	os.WriteFile(filepath.Join(host, "dir", "sub", "data"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(host, "prog"), []byte("#!/bin/sh\n"), 0o755)
	files, plan, err := Assemble(context.Background(), repo, t.TempDir(), Plan{
		Tinyvmm: []string{"run", "--share", ".", "--", "./prog"}, Commands: []string{"busybox ls"},
		Files: []string{filepath.Join(host, "dir"), filepath.Join(host, "prog")},
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	dests := map[string]File{}
	for _, f := range files {
		dests[f.Dest] = f
	}
	if f := dests[FilesDir+"/dir/sub/data"]; f.Src != filepath.Join(host, "dir", "sub", "data") {
		t.Errorf("L1's %s/dir/sub/data is %+v", FilesDir, f)
	}
	if f := dests[FilesDir+"/prog"]; f.Mode != 0o755 {
		t.Errorf("L1's %s/prog is %+v, want the executable", FilesDir, f)
	}
	want := []string{"cd " + FilesDir, "/repo/tinyvmm run --share . -- ./prog", "cd " + FilesDir, "busybox ls"}
	if !slices.Equal(plan[len(plan)-4:], want) {
		t.Errorf("plan ends %q, want %q", plan[len(plan)-4:], want)
	}
	if _, _, err := Assemble(context.Background(), repo, t.TempDir(), Plan{Files: []string{filepath.Join(host, "nothing")}}, t.Logf); err == nil {
		t.Error("a missing file was accepted")
	}
}

// Machine.QEMU and Machine.Firmware (or EnvQEMU and EnvFirmware) run
// another emulator, with each firmware directory as its -L, searched
// before its own: how a QEMU unpacked beside the installed one is
// measured against it.
func TestBootRunsTheMachinesQEMUWithItsFirmware(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	script := filepath.Join(dir, "qemu-other")
	body := "#!/bin/sh\nfor a; do echo \"$a\"; done >" + args + "\necho l1init: /dev/kvm present\necho NESTED-EXIT 0\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvQEMU, script)
	t.Setenv(EnvFirmware, "/fw/qemu::/fw/seabios")
	bin, firmware := QEMUFromEnv()
	if bin != script || !slices.Equal(firmware, []string{"/fw/qemu", "/fw/seabios"}) {
		t.Fatalf("QEMUFromEnv = %q, %q", bin, firmware)
	}
	res, err := Boot(context.Background(), Machine{Kernel: "k", Initramfs: "i", QEMU: bin, Firmware: firmware, Output: io.Discard})
	if err != nil || !res.KVM {
		t.Fatalf("Boot: %+v, %v", res, err)
	}
	got, err := os.ReadFile(args)
	if err != nil {
		t.Fatalf("the machine's QEMU did not run: %v", err)
	}
	if !strings.HasPrefix(string(got), "-L\n/fw/qemu\n-L\n/fw/seabios\n-accel\ntcg\n") {
		t.Errorf("QEMU's arguments:\n%s", got)
	}
	if why := Missing(script, "no-kernel"); !strings.Contains(why, "no L1 kernel") {
		t.Errorf("Missing with the machine's QEMU: %q", why)
	}
	if why := Missing(filepath.Join(dir, "no-qemu"), "no-kernel"); !strings.Contains(why, "no-qemu not found") {
		t.Errorf("Missing without the machine's QEMU: %q", why)
	}
	t.Setenv(EnvQEMU, "")
	t.Setenv(EnvFirmware, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	if bin, firmware := QEMUFromEnv(); bin != QEMUBinary || firmware != nil {
		t.Errorf("QEMUFromEnv unset = %q, %q", bin, firmware)
	}
}

// Unless EnvQEMU names one, L1 runs under the QEMU that fetch-l0-qemu.sh
// unpacked in the user's cache, with that QEMU's own firmware first.
func TestQEMUFromEnvPrefersTheUnpackedL0(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(EnvQEMU, "")
	t.Setenv(EnvFirmware, "")
	dir := filepath.Join(cache, "tinyvmm", "l0-qemu")
	if L0Dir() != dir {
		t.Fatalf("L0Dir = %q, want %q", L0Dir(), dir)
	}
	l0 := filepath.Join(dir, "usr", "bin", QEMUBinary)
	if err := os.MkdirAll(filepath.Dir(l0), 0o755); err != nil {
		t.Fatal(err)
	}
	// Not executable: not a QEMU to run.
	if err := os.WriteFile(l0, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if bin, firmware := QEMUFromEnv(); bin != QEMUBinary || firmware != nil {
		t.Errorf("with a non-executable file: %q, %q", bin, firmware)
	}
	if err := os.Chmod(l0, 0o755); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "usr", "share", "qemu"), filepath.Join(dir, "usr", "share", "seabios")}
	if bin, firmware := QEMUFromEnv(); bin != l0 || !slices.Equal(firmware, want) {
		t.Errorf("QEMUFromEnv = %q, %q; want %q, %q", bin, firmware, l0, want)
	}
	t.Setenv(EnvFirmware, "/fw")
	if bin, firmware := QEMUFromEnv(); bin != l0 || !slices.Equal(firmware, []string{"/fw"}) {
		t.Errorf("with %s: %q, %q", EnvFirmware, bin, firmware)
	}
	t.Setenv(EnvQEMU, "/other/qemu")
	t.Setenv(EnvFirmware, "")
	if bin, firmware := QEMUFromEnv(); bin != "/other/qemu" || firmware != nil {
		t.Errorf("with %s: %q, %q", EnvQEMU, bin, firmware)
	}
}
