package examples

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tinyvmm/examples/internal/exampletest"
	"tinyvmm/internal/godecl"
	"tinyvmm/kvm"
)

// A command block of GUIDE.md is a fenced block whose info string is
// "sh run=KIND", holding one command. The kinds say where it can run.
const (
	runHost = "host" // anywhere with Go and the sources
	runRoot = "root" // as host, and needs root (namespaces, taps)
	runKVM  = "kvm"  // needs a /dev/kvm that runs a Linux guest's user space
	// The run=kvm command before it, in the nested L1 under QEMU
	// (tinyvmm-lab nested): needs QEMU, Go and the built guest, and boots
	// L1 once (a minute or two), so it runs only with EnvGuideNested set.
	runNested = "nested"
)

// EnvGuideNested makes TestGuideCommands run the guide's run=nested
// commands too.
const EnvGuideNested = "TINYVMM_GUIDE_NESTED"

type guideCommand struct {
	line int
	kind string
	cmd  string
}

var fenceRE = regexp.MustCompile("^```sh run=(\\w+)\\s*$")

// parseCommands returns the command blocks of the guide, in order.
func parseCommands(text string) ([]guideCommand, error) {
	var cmds []guideCommand
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.HasPrefix(lines[i], "```sh") {
				return nil, fmt.Errorf("line %d: a sh block without run=host|root|kvm|nested: %q", i+1, lines[i])
			}
			continue
		}
		switch m[1] {
		case runHost, runRoot, runKVM, runNested:
		default:
			return nil, fmt.Errorf("line %d: unknown kind run=%s", i+1, m[1])
		}
		c := guideCommand{line: i + 1, kind: m[1]}
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			if strings.TrimSpace(lines[i]) == "" {
				continue
			}
			if c.cmd != "" {
				return nil, fmt.Errorf("line %d: one command per block", i+1)
			}
			c.cmd = lines[i]
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: block not closed", c.line)
		}
		if c.cmd == "" {
			return nil, fmt.Errorf("line %d: empty block", c.line)
		}
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// citation is one "Read:" bullet: "- `file.go`: `Func`, `Type.Method` — why".
type citation struct {
	line  int
	files []string
	names []string
}

var backtickRE = regexp.MustCompile("`([^`]+)`")

// parseCitations returns every bullet that starts with a backticked file.
func parseCitations(text string) []citation {
	var cites []citation
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "- `") {
			continue
		}
		head, _, _ := strings.Cut(line, " — ")
		c := citation{line: i + 1}
		for _, m := range backtickRE.FindAllStringSubmatch(head, -1) {
			if strings.Contains(m[1], "/") || strings.HasSuffix(m[1], ".go") {
				c.files = append(c.files, m[1])
			} else {
				c.names = append(c.names, m[1])
			}
		}
		if len(c.files) > 0 {
			cites = append(cites, c)
		}
	}
	return cites
}

// repoRoot is the directory holding go.mod above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

func readGuide(t *testing.T) (root, text string) {
	t.Helper()
	root = repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "GUIDE.md"))
	if err != nil {
		t.Fatalf("%v (test/nested copies GUIDE.md into L1)", err)
	}
	return root, string(b)
}

// TestGuideCitesWhatExists checks every file the guide names and every
// function listed under "Read:" against the source tree.
func TestGuideCitesWhatExists(t *testing.T) {
	root, text := readGuide(t)
	if _, err := os.Stat(filepath.Join(root, "kvm", "vm.go")); err != nil {
		t.Skip("no sources here (the nested L1 carries only binaries); checked on the host")
	}
	// Any backticked path whose first element is a top-level entry of the
	// repository must exist.
	top := map[string]bool{}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		top[e.Name()] = true
	}
	for i, line := range strings.Split(text, "\n") {
		for _, m := range backtickRE.FindAllStringSubmatch(line, -1) {
			p := m[1]
			first, _, nested := strings.Cut(p, "/")
			if !nested || strings.ContainsAny(p, " *") || !top[first] {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("GUIDE.md:%d: %s does not exist", i+1, p)
			}
		}
	}
	cites := parseCitations(text)
	if len(cites) < 40 {
		t.Fatalf("found only %d Read: bullets; the parser no longer matches the guide", len(cites))
	}
	checked := 0
	for _, c := range cites {
		for _, f := range c.files {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("GUIDE.md:%d: %s does not exist", c.line, f)
			}
		}
		if len(c.names) == 0 {
			continue
		}
		if len(c.files) != 1 {
			t.Errorf("GUIDE.md:%d: functions listed for %d files; name one file", c.line, len(c.files))
			continue
		}
		decls, err := godecl.Declared(filepath.Join(root, c.files[0]))
		if err != nil {
			t.Errorf("GUIDE.md:%d: %v", c.line, err)
			continue
		}
		for _, n := range c.names {
			if !decls[n] {
				t.Errorf("GUIDE.md:%d: %s does not declare %s", c.line, c.files[0], n)
			}
			checked++
		}
	}
	t.Logf("%d Read: bullets, %d functions and types checked", len(cites), checked)
}

func TestParseCommands(t *testing.T) {
	good := "x\n```sh run=host\ngo version\n```\n```sh run=kvm\n\nbin/tinyvmm run -- true\n```\n```text\nnot a command\n```\n" +
		"```sh run=nested\nbin/tinyvmm-lab nested -- run -- true\n```\n"
	cmds, err := parseCommands(good)
	if err != nil || len(cmds) != 3 || cmds[0] != (guideCommand{2, runHost, "go version"}) || cmds[1].cmd != "bin/tinyvmm run -- true" ||
		cmds[2] != (guideCommand{12, runNested, "bin/tinyvmm-lab nested -- run -- true"}) {
		t.Fatalf("got %+v, %v", cmds, err)
	}
	for _, bad := range []string{
		"```sh\nls\n```\n",
		"```sh run=gpu\nls\n```\n",
		"```sh run=host\nls\nls\n```\n",
		"```sh run=host\nls\n",
		"```sh run=host\n```\n",
	} {
		if _, err := parseCommands(bad); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

func TestParseCitations(t *testing.T) {
	c := parseCitations("- `a/b.go`: `F`, `T.M` — uses `c/d.go` and `X`\n- `e.go` and `f/g.go` — two\n- plain\n")
	if len(c) != 2 || strings.Join(c[0].files, ",") != "a/b.go" || strings.Join(c[0].names, ",") != "F,T.M" ||
		len(c[1].files) != 2 || len(c[1].names) != 0 {
		t.Fatalf("got %+v", c)
	}
}

// exampleRunRE matches the guide's way of running an example.
var exampleRunRE = regexp.MustCompile(`^go run \./examples/(\w+)((?: .*)?)$`)

// asExampleBinary turns `go run ./examples/NAME ARGS` into the example's
// test binary standing in for the program, where there is no Go toolchain
// but test/nested put the binary (L1); ok is false otherwise.
func asExampleBinary(root, cmd string) (string, bool) {
	m := exampleRunRE.FindStringSubmatch(cmd)
	if m == nil {
		return "", false
	}
	if _, err := exec.LookPath("go"); err == nil {
		return "", false
	}
	bin := filepath.Join("examples", m[1], m[1]+".test")
	if _, err := os.Stat(filepath.Join(root, bin)); err != nil {
		return "", false
	}
	return exampletest.EnvMain + "=1 ./" + bin + m[2], true
}

// TestGuideCommands runs every command of the guide, in order, from the
// repository root: host and root commands where Go is, KVM commands where
// KVM can run a Linux guest (here, or in the nested L1).
func TestGuideCommands(t *testing.T) {
	root, text := readGuide(t)
	cmds, err := parseCommands(text)
	if err != nil {
		t.Fatalf("GUIDE.md: %v", err)
	}
	if len(cmds) < 10 {
		t.Fatalf("found only %d commands in GUIDE.md", len(cmds))
	}
	_, goErr := exec.LookPath("go")
	h := kvm.Detect()
	for _, c := range cmds {
		name := fmt.Sprintf("line%d-%s", c.line, c.kind)
		t.Run(name, func(t *testing.T) {
			cmd := c.cmd
			timeout := 5 * time.Minute
			switch c.kind {
			case runHost, runRoot:
				if goErr != nil {
					t.Skip("no Go toolchain here (the nested L1): host commands run on the host")
				}
				if c.kind == runRoot && os.Geteuid() != 0 {
					t.Skip("needs root")
				}
			case runNested:
				if os.Getenv(EnvGuideNested) == "" {
					t.Skip("boots the nested L1 (a minute or two): set " + EnvGuideNested + "=1; TestGuideNestedMatchesKVM checks what it runs")
				}
				if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
					t.Skip("no qemu-system-x86_64 here (the nested L1 has none: the runner cannot run inside it)")
				}
				if goErr != nil {
					t.Skip("no Go toolchain here: the nested runner builds L1 from the sources")
				}
				timeout = 15 * time.Minute
			case runKVM:
				if !h.Usable {
					t.Skip(h.Why + "; make test-nested runs it in L1")
				}
				if h.PVM {
					t.Skip("host KVM is PVM: a Linux guest's user space cannot run here; make test-nested runs it in L1")
				}
				if bin, ok := asExampleBinary(root, cmd); ok {
					cmd = bin
				}
			}
			out := runCommand(t, root, c.line, cmd, timeout)
			if err := checkTestsRan(cmd, out); err != nil {
				t.Errorf("GUIDE.md:%d: %v", c.line, err)
			}
			if err := checkNestedTestsPassed(cmd, out); err != nil {
				t.Errorf("GUIDE.md:%d: %v", c.line, err)
			}
		})
	}
}

// goTestRE matches a guide command that runs named Go tests: its -run
// pattern and its package.
var goTestRE = regexp.MustCompile(`^go test .*-run '([^']+)'.* (\./\S+)$`)

// runPattern splits a -run pattern into its levels (split at /), each a
// list of the names it alternates between, anchors and groups dropped.
func runPattern(pattern string) [][]string {
	var levels [][]string
	for _, level := range strings.Split(pattern, "/") {
		level = strings.NewReplacer("^", "", "$", "", "(", "", ")", "").Replace(level)
		levels = append(levels, strings.Split(level, "|"))
	}
	return levels
}

// checkTestsRan fails a go test command that ran no test, or that ran none
// of a name its -run pattern lists: `go test -run NoSuchTest` passes with
// "[no tests to run]", so a renamed test would turn the guide's check into
// one that cannot fail. It needs -v output; other commands pass.
func checkTestsRan(cmd, out string) error {
	m := goTestRE.FindStringSubmatch(cmd)
	if m == nil {
		return nil
	}
	if !strings.Contains(cmd, " -v") {
		return fmt.Errorf("%s: a go test command of the guide needs -v, so that what ran shows", cmd)
	}
	for _, nothing := range []string{"[no tests to run]", "no tests to run", "[no test files]"} {
		if strings.Contains(out, nothing) {
			return fmt.Errorf("%s ran no test (%q)", cmd, nothing)
		}
	}
	var ran []string
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "=== RUN"); ok {
			ran = append(ran, strings.TrimSpace(name))
		}
	}
	levels := runPattern(m[1])
	for depth, names := range levels {
		for _, name := range names {
			found := false
			for _, r := range ran {
				parts := strings.Split(r, "/")
				if len(parts) > depth && parts[depth] == name {
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("%s: no test or subtest named %q ran", cmd, name)
			}
		}
	}
	return nil
}

// TestGuideGoTestsExist checks, without running them, that the top-level
// tests each go test command of the guide names are declared in its
// package, and a command that names nothing real fails the test.
func TestGuideGoTestsExist(t *testing.T) {
	root, text := readGuide(t)
	if _, err := os.Stat(filepath.Join(root, "kvm", "vm.go")); err != nil {
		t.Skip("no sources here (the nested L1 carries only binaries); checked on the host")
	}
	cmds, err := parseCommands(text)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cmds {
		m := goTestRE.FindStringSubmatch(c.cmd)
		if m == nil {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(root, m[2], "*_test.go"))
		declared := map[string]bool{}
		for _, f := range files {
			d, err := godecl.Declared(f)
			if err != nil {
				t.Fatal(err)
			}
			for n := range d {
				declared[n] = true
			}
		}
		for _, name := range runPattern(m[1])[0] {
			if !declared[name] {
				t.Errorf("GUIDE.md:%d: %s declares no test %s", c.line, m[2], name)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no go test command found in GUIDE.md; the pattern no longer matches the guide")
	}
}

// rejectsEach checks that check refuses cmd's output in each case, named
// by what is wrong with it.
func rejectsEach(t *testing.T, check func(cmd, out string) error, cmd string, outs map[string]string) {
	t.Helper()
	for name, out := range outs {
		if err := check(cmd, out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckTestsRan(t *testing.T) {
	const cmd = "go test -count=1 -run 'TestA|TestB/x/(One|Two)$' -v ./pkg/"
	good := "=== RUN   TestA\n--- PASS: TestA\n=== RUN   TestB\n=== RUN   TestB/x\n=== RUN   TestB/x/One\n=== RUN   TestB/x/Two\nok\n"
	if err := checkTestsRan(cmd, good); err != nil {
		t.Errorf("every named test ran, got %v", err)
	}
	rejectsEach(t, checkTestsRan, cmd, map[string]string{
		"nothing ran":     "testing: warning: no tests to run\nPASS\nok  \tpkg\t0.01s [no tests to run]\n",
		"a top test lost": "=== RUN   TestB\n=== RUN   TestB/x/One\n=== RUN   TestB/x/Two\n",
		"a subtest lost":  "=== RUN   TestA\n=== RUN   TestB\n=== RUN   TestB/x/One\n",
	})
	if err := checkTestsRan("go test -count=1 -run 'TestA' ./pkg/", good); err == nil {
		t.Error("a go test command without -v accepted")
	}
}

// runCommand runs one shell command, bounded in time, and fails on a
// non-zero status; its output goes to the test log and is returned.
func runCommand(t *testing.T, root string, line int, command string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 0; sc.Scan(); n++ {
		if n == 60 {
			b.WriteString("  ...\n")
			break
		}
		b.WriteString("  " + sc.Text() + "\n")
	}
	t.Logf("GUIDE.md:%d: $ %s  (%.1fs)\n%s", line, command, time.Since(start).Seconds(), b.String())
	if err != nil {
		t.Fatalf("GUIDE.md:%d: %s: %v", line, command, err)
	}
	return string(out)
}

// labNested starts every run=nested command but the tour's.
const labNested = "bin/tinyvmm-lab nested "

// nestedTestRun returns the -test.run names a run=nested command passes
// its test binaries (-test-arg -test.run=A|B), and whether it builds a
// package's tests (-pkg).
func nestedTestRun(cmd string) (names []string, pkgs []string) {
	f := strings.Fields(cmd)
	for i := 0; i+1 < len(f); i++ {
		switch {
		case f[i] == "--":
			return names, pkgs
		case f[i] == "-pkg":
			pkgs = append(pkgs, f[i+1])
		case f[i] == "-test-arg" && strings.HasPrefix(f[i+1], "-test.run="):
			names = append(names, strings.Split(strings.TrimPrefix(f[i+1], "-test.run="), "|")...)
		}
	}
	return names, pkgs
}

// checkNestedTestsPassed fails a run=nested command that builds tests in
// L1 but names none, or whose named tests did not pass there: a test that
// skips, or a name that matches nothing, passes the runner's status.
func checkNestedTestsPassed(cmd, out string) error {
	if !strings.HasPrefix(cmd, labNested) {
		return nil
	}
	names, pkgs := nestedTestRun(cmd)
	if len(pkgs) == 0 {
		return nil
	}
	if len(names) == 0 {
		return fmt.Errorf("%s: name the tests to run (-test-arg -test.run=NAME), so that one that runs nothing fails", cmd)
	}
	if strings.Contains(out, "no tests to run") {
		return fmt.Errorf("%s ran no test", cmd)
	}
	for _, name := range names {
		if !strings.Contains(out, "--- PASS: "+name+" (") {
			return fmt.Errorf("%s: %s did not pass in L1 (skipped, failed or never ran)", cmd, name)
		}
	}
	return nil
}

// nestedRunsKVM checks that nested, a run=nested command, runs in L1 what
// kvm, the run=kvm command before it, runs where there is KVM:
//   - `go run ./examples/NAME` -> `bin/tinyvmm-lab nested -pkg ./examples/NAME
//     -test-arg -test.run=TestX`: the example's test, which runs the
//     example's code (its `run`), since L1 has no Go; tests names TestX;
//   - `[unshare -n] bin/tinyvmm ARGS` -> `bin/tinyvmm-lab nested [FLAGS] -- ARGS`,
//     ARGS the same text (L1 is a machine of its own: nothing to unshare);
//   - the tour is its own nested command: without KVM it boots L1 itself.
func nestedRunsKVM(kvm, nested string) (tests []string, err error) {
	if strings.HasPrefix(kvm, "bin/tinyvmm tour") {
		if nested != kvm {
			return nil, fmt.Errorf("the tour boots L1 by itself without KVM: its nested command is %q, not %q", kvm, nested)
		}
		return nil, nil
	}
	if !strings.HasPrefix(nested, labNested) {
		return nil, fmt.Errorf("%q does not start with %q", nested, labNested)
	}
	if m := exampleRunRE.FindStringSubmatch(kvm); m != nil {
		names, pkgs := nestedTestRun(nested)
		if m[2] != "" || len(pkgs) != 1 || pkgs[0] != "./examples/"+m[1] || len(names) != 1 || strings.Contains(nested, " -- ") {
			return nil, fmt.Errorf("for %q, want %s-pkg ./examples/%s -test-arg -test.run=TestNAME (the example's one test), got %q", kvm, labNested, m[1], nested)
		}
		return names, nil
	}
	args, ok := strings.CutPrefix(strings.TrimPrefix(kvm, "unshare -n "), "bin/tinyvmm ")
	if !ok {
		return nil, fmt.Errorf("no nested form known for %q", kvm)
	}
	_, inner, ok := strings.Cut(nested, " -- ")
	if !ok || inner != args {
		return nil, fmt.Errorf("%q runs %q in L1, not the run=kvm command's %q", nested, inner, args)
	}
	return nil, nil
}

// TestGuideNestedMatchesKVM: every run=kvm command is followed by one
// run=nested command that runs the same in the nested L1 (nestedRunsKVM).
// The nested runner cannot run inside L1 (no QEMU, no Go there), so where
// make test-nested runs the run=kvm commands, this is what ties the two:
// the nested command's inner part is what L1's run of the guide runs.
func TestGuideNestedMatchesKVM(t *testing.T) {
	root, text := readGuide(t)
	cmds, err := parseCommands(text)
	if err != nil {
		t.Fatal(err)
	}
	_, srcErr := os.Stat(filepath.Join(root, "kvm", "vm.go"))
	pairs := 0
	var kvmCmd *guideCommand
	for i := range cmds {
		c := &cmds[i]
		switch c.kind {
		case runKVM:
			if kvmCmd != nil {
				t.Errorf("GUIDE.md:%d: run=kvm command without a run=nested command after it", kvmCmd.line)
			}
			kvmCmd = c
		case runNested:
			if kvmCmd == nil {
				t.Errorf("GUIDE.md:%d: run=nested command with no run=kvm command before it", c.line)
				continue
			}
			tests, err := nestedRunsKVM(kvmCmd.cmd, c.cmd)
			if err != nil {
				t.Errorf("GUIDE.md:%d: %v", c.line, err)
			}
			if _, pkgs := nestedTestRun(c.cmd); srcErr == nil && len(pkgs) == 1 {
				declared := map[string]bool{}
				files, _ := filepath.Glob(filepath.Join(root, pkgs[0], "*_test.go"))
				for _, f := range files {
					d, err := godecl.Declared(f)
					if err != nil {
						t.Fatal(err)
					}
					for n := range d {
						declared[n] = true
					}
				}
				for _, name := range tests {
					if !declared[name] {
						t.Errorf("GUIDE.md:%d: %s declares no test %s", c.line, pkgs[0], name)
					}
				}
			}
			kvmCmd = nil
			pairs++
		}
	}
	if kvmCmd != nil {
		t.Errorf("GUIDE.md:%d: run=kvm command without a run=nested command after it", kvmCmd.line)
	}
	if pairs < 5 {
		t.Errorf("found %d run=kvm/run=nested pairs; the guide has 5 stages that need KVM", pairs)
	}
}

func TestNestedRunsKVM(t *testing.T) {
	for _, c := range []struct{ kvm, nested string }{
		{"go run ./examples/hello", "bin/tinyvmm-lab nested -pkg ./examples/hello -test-arg -test.run=TestHello"},
		{"bin/tinyvmm run -- sh -c 'a; b'", "bin/tinyvmm-lab nested -- run -- sh -c 'a; b'"},
		{"unshare -n bin/tinyvmm run --net tap=tap0 -- true", "bin/tinyvmm-lab nested -smp 2 -- run --net tap=tap0 -- true"},
		{"bin/tinyvmm tour --html x", "bin/tinyvmm tour --html x"},
	} {
		if _, err := nestedRunsKVM(c.kvm, c.nested); err != nil {
			t.Errorf("%q for %q: %v", c.nested, c.kvm, err)
		}
	}
	for _, c := range []struct{ kvm, nested string }{
		{"go run ./examples/hello", "bin/tinyvmm-lab nested -pkg ./examples/serial -test-arg -test.run=TestSerial"},
		{"go run ./examples/hello", "bin/tinyvmm-lab nested -pkg ./examples/hello"},
		{"bin/tinyvmm run -- sh -c 'a; b'", "bin/tinyvmm-lab nested -- run -- sh -c 'a'"},
		{"bin/tinyvmm run -- true", "make run-nested CMD=true"},
		{"bin/tinyvmm tour --html x", "bin/tinyvmm-lab nested -- tour --html x"},
		{"ls", "bin/tinyvmm-lab nested -- ls"},
	} {
		if _, err := nestedRunsKVM(c.kvm, c.nested); err == nil {
			t.Errorf("%q accepted for %q", c.nested, c.kvm)
		}
	}
}

func TestCheckNestedTestsPassed(t *testing.T) {
	const cmd = "bin/tinyvmm-lab nested -pkg ./examples/hello -test-arg -test.run=TestHello"
	if err := checkNestedTestsPassed(cmd, "=== RUN   TestHello\n--- PASS: TestHello (0.01s)\nPASS\n"); err != nil {
		t.Errorf("a passing test: %v", err)
	}
	rejectsEach(t, checkNestedTestsPassed, cmd, map[string]string{
		"skipped":     "=== RUN   TestHello\n--- SKIP: TestHello (0.00s)\nPASS\n",
		"nothing ran": "testing: warning: no tests to run\nPASS\n",
		"failed":      "=== RUN   TestHello\n--- FAIL: TestHello (0.01s)\n",
	})
	if err := checkNestedTestsPassed("bin/tinyvmm-lab nested -pkg ./examples/hello", "--- PASS: TestHello (0.01s)\n"); err == nil {
		t.Error("a -pkg command that names no test accepted")
	}
	if err := checkNestedTestsPassed("bin/tinyvmm-lab nested -- run -- true", ""); err != nil {
		t.Errorf("a command line without tests: %v", err)
	}
}
