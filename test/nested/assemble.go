package nested

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Repo is where the repository is mirrored inside L1: test binaries run in
// /repo/<package> with that package's testdata, and the default guest built
// by `make guest` is at /repo/out/guest, as on the host.
const Repo = "/repo"

// Plan says what L1 runs.
type Plan struct {
	// Packages are Go packages (./kvm, ./vmm/...) whose tests run in L1, each
	// compiled with `go test -c`, in this order. Patterns are expanded.
	Packages []string
	// TestArgs are added to every test binary (-test.run=..., -test.v).
	TestArgs []string
	// TestTimeout bounds each test binary; 10m when zero.
	TestTimeout time.Duration
	// Tinyvmm, when set, is a tinyvmm command line run in /repo after the tests.
	Tinyvmm []string
	// Lab runs the Tinyvmm command line with tinyvmm-lab (bench e2e,
	// bench boot, ...) instead of tinyvmm.
	Lab bool
	// Commands are command lines run last, in /repo, one plan line each
	// (words split on spaces; busybox applets through "busybox APPLET").
	Commands []string
	// ProbeExits is how many port-I/O exits kvmprobe times first; 0 skips it.
	ProbeExits int
	// QEMU, when set, is the host's QEMU binary (a path or a name in $PATH)
	// to put into L1 with its libraries and the data QEMUData names, so the
	// bench can run QEMU on L1's KVM, and NoIOURing (built with cc).
	// Off by default: it adds ~35 MB.
	QEMU string
	// Tools are host programs (paths or names in $PATH) that go into L1 at
	// their own paths with their libraries, such as iperf3 for bench e2e's
	// Linux-guest cells.
	Tools []string
	// Files are host files or directories (each with everything under
	// it) that go into L1 under FilesDir, each by its base name; with any,
	// the Tinyvmm line and the Commands run in FilesDir instead of Repo,
	// so that `tinyvmm run --share . -- ./prog` finds them, in L1 and in
	// the guest (make run-nested FILES=...).
	Files []string
	// Perf, when set, is the host's perf binary (linux-perf): it goes into
	// L1 with its libraries as /bin/perf, the Tinyvmm line runs under
	// `perf record -a` (every L1 CPU, cpu-clock: L1 has no PMU), and
	// perf report's lines by thread name and symbol follow it between
	// NESTED-PERF-BEGIN and NESTED-PERF-END lines, kernel samples as
	// addresses (L1 has no kallsyms): SummarizePerf names them.
	Perf string
	// PerfSwitches, with Perf, records every context switch instead
	// (SwitchRecordArgs) and sends the record out, gzipped in base64,
	// between NESTED-SWITCHES-BEGIN and NESTED-SWITCHES-END lines, for
	// perf script and SummarizeSwitches on the host.
	PerfSwitches bool
}

// FilesDir is where Plan.Files go in L1.
const FilesDir = "/files"

// PerfData is where Plan.Perf's profile is written in L1.
const PerfData = "/tmp/perf.data"

// NoIOURing is where L1 has no_io_uring.so (test/nested/nouring) when
// QEMU is in it: LD_PRELOADed into QEMU, it fails QEMU's io_uring setup
// with ENOSYS (bench e2e --qemu-preload; bench/nested.sh).
const NoIOURing = "/usr/lib/tinyvmm/no-io-uring.so"

// probeDeadline bounds kvmprobe in L1; a healthy run takes a few seconds.
const probeDeadline = 30 * time.Second

// busyboxApplets are linked into /bin when the host has busybox-static:
// enough for tests that shell out (ip, ping), GUIDE.md's commands (unshare)
// and a look around.
var busyboxApplets = []string{"sh", "ip", "ping", "ls", "cat", "dmesg", "mount", "ps", "sleep", "uname", "true", "false", "unshare"}

// Assemble builds everything L1 needs from the repository at repo into work
// (a scratch directory) and returns the initramfs files and the plan lines.
// Progress goes to logf.
func Assemble(ctx context.Context, repo, work string, p Plan, logf func(string, ...any)) ([]File, []string, error) {
	var files []File
	var plan []string
	build := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		return nil
	}

	for _, tool := range []string{"l1init", "kvmprobe"} {
		out := filepath.Join(work, tool)
		logf("building %s", tool)
		if err := build("build", "-o", out, "./test/nested/"+tool); err != nil {
			return nil, nil, err
		}
		dest := "/bin/" + tool
		if tool == "l1init" {
			dest = "/init"
		}
		files = append(files, File{Dest: dest, Src: out, Mode: 0o755})
	}
	if p.ProbeExits > 0 {
		// A gate: when KVM in L1 cannot run a guest, the plan stops there and the run fails.
		plan = append(plan, fmt.Sprintf("!kvmprobe -exits %d -deadline %v", p.ProbeExits, probeDeadline))
	}

	pkgs, err := listPackages(ctx, repo, p.Packages)
	if err != nil {
		return nil, nil, err
	}
	timeout := p.TestTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	for _, pkg := range pkgs {
		name := path.Base(pkg.rel) + ".test"
		out := filepath.Join(work, strings.ReplaceAll(pkg.rel, "/", "_")+".test")
		logf("compiling tests of %s", pkg.rel)
		if err := build("test", "-c", "-o", out, "./"+pkg.rel); err != nil {
			return nil, nil, err
		}
		if _, err := os.Stat(out); err != nil {
			logf("%s has no tests; skipped", pkg.rel)
			continue
		}
		dir := path.Join(Repo, pkg.rel)
		files = append(files, File{Dest: path.Join(dir, name), Src: out, Mode: 0o755})
		testdata, err := treeFiles(filepath.Join(repo, pkg.rel, "testdata"), path.Join(dir, "testdata"))
		if err != nil {
			return nil, nil, err
		}
		files = append(files, testdata...)
		plan = append(plan, "cd "+dir,
			strings.Join(append([]string{"./" + name, "-test.timeout=" + timeout.String()}, p.TestArgs...), " "))
	}

	if _, err := os.Stat(filepath.Join(repo, "main.go")); err == nil {
		out := filepath.Join(work, "tinyvmm")
		logf("building tinyvmm")
		if err := build("build", "-o", out, "."); err != nil {
			return nil, nil, err
		}
		// bin/tinyvmm is where `make build` puts it and tests look for it.
		files = append(files, File{Dest: Repo + "/tinyvmm", Src: out, Mode: 0o755},
			File{Dest: Repo + "/bin/tinyvmm", Link: Repo + "/tinyvmm"},
			File{Dest: "/bin/tinyvmm", Link: Repo + "/tinyvmm"})
		// --net user's process, next to tinyvmm where it looks for it.
		if _, err := os.Stat(filepath.Join(repo, "cmd", "tinyvmm-usernet")); err == nil {
			out := filepath.Join(work, "tinyvmm-usernet")
			if err := build("build", "-o", out, "./cmd/tinyvmm-usernet"); err != nil {
				return nil, nil, err
			}
			files = append(files, File{Dest: Repo + "/tinyvmm-usernet", Src: out, Mode: 0o755},
				File{Dest: Repo + "/bin/tinyvmm-usernet", Link: Repo + "/tinyvmm-usernet"},
				File{Dest: "/bin/tinyvmm-usernet", Link: Repo + "/tinyvmm-usernet"})
		}
		// The lab command (bench e2e, boot, share), beside tinyvmm, which
		// its benchmarks run.
		if _, err := os.Stat(filepath.Join(repo, "cmd", LabCommand)); err == nil {
			out := filepath.Join(work, LabCommand)
			logf("building %s", LabCommand)
			if err := build("build", "-o", out, "./cmd/"+LabCommand); err != nil {
				return nil, nil, err
			}
			files = append(files, File{Dest: Repo + "/" + LabCommand, Src: out, Mode: 0o755},
				File{Dest: Repo + "/bin/" + LabCommand, Link: Repo + "/" + LabCommand},
				File{Dest: "/bin/" + LabCommand, Link: Repo + "/" + LabCommand})
		} else if p.Lab {
			return nil, nil, fmt.Errorf("no cmd/%s in %s: the lab cannot be built", LabCommand, repo)
		}
	} else if len(p.Tinyvmm) > 0 {
		return nil, nil, fmt.Errorf("no main.go in %s: tinyvmm cannot be built", repo)
	}
	cwd := Repo
	if len(p.Files) > 0 {
		cwd = FilesDir
		seen := map[string]string{}
		for _, f := range p.Files {
			abs, err := filepath.Abs(f)
			if err != nil {
				return nil, nil, err
			}
			base := filepath.Base(abs)
			if other, dup := seen[base]; dup {
				return nil, nil, fmt.Errorf("files %s and %s have the same name %s in L1's %s", other, f, base, FilesDir)
			}
			seen[base] = f
			real, err := filepath.EvalSymlinks(abs)
			if err != nil {
				return nil, nil, fmt.Errorf("file for L1: %v", err)
			}
			tree, err := treeFiles(real, path.Join(FilesDir, base))
			if err != nil {
				return nil, nil, err
			}
			if len(tree) == 0 {
				return nil, nil, fmt.Errorf("file for L1: %s holds no regular file", f)
			}
			logf("adding %s as %s (%d files)", f, path.Join(FilesDir, base), len(tree))
			files = append(files, tree...)
		}
	}
	if len(p.Tinyvmm) > 0 {
		plan = append(plan, "cd "+cwd)
		bin := "tinyvmm"
		if p.Lab {
			bin = LabCommand
		}
		plan = append(plan, tinyvmmLines(bin, p.Tinyvmm, p.perfMode())...)
	}
	if len(p.Commands) > 0 {
		plan = append(plan, "cd "+cwd)
		plan = append(plan, p.Commands...)
	}

	// The L2 guest, for tests and tinyvmm's defaults; go.mod so tests that
	// look for the repository root find it.
	guest, err := treeFiles(filepath.Join(repo, "out", "guest"), Repo+"/out/guest")
	if err != nil {
		return nil, nil, err
	}
	files = append(files, guest...)
	files = append(files, File{Dest: Repo + "/go.mod", Src: filepath.Join(repo, "go.mod"), Mode: 0o644})
	// GUIDE.md, whose KVM commands examples/guide_test.go runs in L1.
	if _, err := os.Stat(filepath.Join(repo, "GUIDE.md")); err == nil {
		files = append(files, File{Dest: Repo + "/GUIDE.md", Src: filepath.Join(repo, "GUIDE.md"), Mode: 0o644})
	}

	if p.QEMU != "" {
		logf("adding %s, its libraries and data", p.QEMU)
		qemu, err := QEMUFiles(p.QEMU, QEMUData)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, qemu...)
		so := filepath.Join(work, "no-io-uring.so")
		logf("building %s", NoIOURing)
		cc := exec.CommandContext(ctx, "cc", "-shared", "-fPIC", "-nostdlib", "-O2", "-Wall", "-o", so,
			filepath.Join(repo, "test", "nested", "nouring", "no_io_uring.c"))
		if msg, err := cc.CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("cc no_io_uring.c (apt-get install gcc): %v\n%s", err, msg)
		}
		files = append(files, File{Dest: NoIOURing, Src: so, Mode: 0o644})
	}

	if len(p.Tools) > 0 {
		tools, err := ToolFiles(p.Tools, logf)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, tools...)
	}

	if p.Perf != "" {
		if len(p.Tinyvmm) == 0 {
			return nil, nil, errors.New("perf needs a tinyvmm command to record")
		}
		logf("adding %s and its libraries", p.Perf)
		libs, err := SharedLibraries(p.Perf)
		if err != nil {
			return nil, nil, fmt.Errorf("perf: %v", err)
		}
		files = append(files, File{Dest: "/bin/perf", Src: p.Perf, Mode: 0o755})
		for _, lib := range libs {
			files = append(files, File{Dest: lib, Src: lib, Mode: 0o755})
		}
	}

	if bb, err := exec.LookPath("busybox"); err == nil {
		files = append(files, File{Dest: "/bin/busybox", Src: bb, Mode: 0o755})
		for _, applet := range busyboxApplets {
			files = append(files, File{Dest: "/bin/" + applet, Link: "busybox"})
		}
	}
	return files, plan, nil
}

// ToolFiles are the L1 files of host programs (paths or names in $PATH):
// each at its own absolute path, with the dynamic loader and the shared
// libraries it needs, each once.
func ToolFiles(tools []string, logf func(string, ...any)) ([]File, error) {
	var files []File
	for _, tool := range tools {
		bin, err := exec.LookPath(tool)
		if err != nil {
			return nil, fmt.Errorf("tool for L1: %v", err)
		}
		if bin, err = filepath.Abs(bin); err != nil {
			return nil, err
		}
		logf("adding %s and its libraries", bin)
		libs, err := SharedLibraries(bin)
		if err != nil {
			return nil, fmt.Errorf("tool for L1: %v", err)
		}
		for _, f := range append([]string{bin}, libs...) {
			if !slices.ContainsFunc(files, func(g File) bool { return g.Dest == f }) {
				files = append(files, File{Dest: f, Src: f, Mode: 0o755})
			}
		}
	}
	return files, nil
}

// LabCommand is the lab's command (cmd/tinyvmm-lab), put into L1 beside
// tinyvmm.
const LabCommand = "tinyvmm-lab"

// perfMode is how the plan's tinyvmm step runs under perf.
type perfMode int

const (
	noPerf       perfMode = iota
	perfProfile           // Plan.Perf: samples, then perf report's lines
	perfSwitches          // Plan.PerfSwitches: every switch, the record sent out
)

func (p Plan) perfMode() perfMode {
	switch {
	case p.Perf == "":
		return noPerf
	case p.PerfSwitches:
		return perfSwitches
	}
	return perfProfile
}

// tinyvmmLines are the plan's tinyvmm step: bin (tinyvmm or the lab) with
// args, or under perf record and followed by the report or the record.
func tinyvmmLines(bin string, args []string, perf perfMode) []string {
	words := append([]string{Repo + "/" + bin}, args...)
	switch perf {
	case perfProfile:
		return []string{
			PlanLine(append(strings.Fields("/bin/perf record -a -e cpu-clock -F 999 -o "+PerfData), words...)),
			"busybox echo NESTED-PERF-BEGIN",
			"/bin/perf report -i " + PerfData + " " + PerfReportArgs,
			"busybox echo NESTED-PERF-END",
		}
	case perfSwitches:
		return []string{
			PlanLine(append(strings.Fields("/bin/perf "+SwitchRecordArgs+" -o "+PerfData), words...)),
			"busybox gzip -f " + PerfData,
			"busybox echo NESTED-SWITCHES-BEGIN",
			"busybox base64 " + PerfData + ".gz",
			"busybox echo NESTED-SWITCHES-END",
		}
	}
	return []string{PlanLine(words)}
}

type goPackage struct{ rel string }

// listPackages expands patterns (./kvm/...) to package directories relative to repo.
func listPackages(ctx context.Context, repo string, patterns []string) ([]goPackage, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-f", "{{.Dir}}"}, patterns...)...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return nil, fmt.Errorf("go list %s: %v %s", strings.Join(patterns, " "), err, msg)
	}
	root, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	var pkgs []goPackage
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, fmt.Errorf("package %s is outside the repository %s", dir, root)
		}
		pkgs = append(pkgs, goPackage{rel: filepath.ToSlash(rel)})
	}
	return pkgs, nil
}

// treeFiles lists the regular files under dir (none when dir is missing) as
// initramfs files under dest.
func treeFiles(dir, dest string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, File{Dest: path.Join(dest, filepath.ToSlash(rel)), Src: p, Mode: uint64(info.Mode().Perm())})
		return nil
	})
	return files, err
}

// PlanLine writes one plan step. Words go apart by spaces, as l1init
// splits them, unless one holds a space, a '#' or a quote, or is empty, or
// the first starts with '['; then the line is a JSON array of the words,
// which l1init reads as such, so `sh -c 'ping -c 2 10.0.2.1 && echo ok'`
// reaches L1 as three words.
func PlanLine(words []string) string {
	plain := len(words) > 0 && !strings.HasPrefix(words[0], "[")
	for _, w := range words {
		if w == "" || strings.ContainsAny(w, " \t\n#\"'") {
			plain = false
		}
	}
	if plain {
		return strings.Join(words, " ")
	}
	b, _ := json.Marshal(words)
	return string(b)
}
