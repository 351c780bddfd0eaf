package nested

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ciRecipe returns the command lines of README.md's "In CI" recipe: the
// first indented block under that heading, one command a line.
func ciRecipe(readme string) ([]string, error) {
	lines := strings.Split(readme, "\n")
	i := 0
	for i < len(lines) && strings.TrimSpace(lines[i]) != "### In CI" {
		i++
	}
	if i == len(lines) {
		return nil, fmt.Errorf(`no "### In CI" heading`)
	}
	for i < len(lines) && !strings.HasPrefix(lines[i], "    ") {
		i++
	}
	var cmds []string
	for ; i < len(lines) && strings.HasPrefix(lines[i], "    "); i++ {
		cmds = append(cmds, strings.TrimSpace(lines[i]))
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf(`no indented command block under "### In CI"`)
	}
	return cmds, nil
}

// ciPackage is the recipe's package path, which the test replaces with its
// own package (testdata/cirecipe/netpkg, which imports net).
const ciPackage = " ./pkg"

// splitRecipe sorts the recipe's lines: those before the first tinyvmm run
// build on the host (the package path substituted), the rest run in the
// guest's machine (here L1).
func splitRecipe(cmds []string, pkg string) (host, guest []string, err error) {
	for _, c := range cmds {
		switch {
		case strings.HasPrefix(c, "tinyvmm/bin/tinyvmm "):
			guest = append(guest, c)
		case len(guest) > 0:
			return nil, nil, fmt.Errorf("%q comes after the tinyvmm line: the test does not know where to run it", c)
		case strings.HasPrefix(c, "go test -c ") && strings.HasSuffix(c, ciPackage):
			host = append(host, strings.TrimSuffix(c, ciPackage)+" "+pkg)
		case strings.HasPrefix(c, "go "):
			return nil, nil, fmt.Errorf("%q: a go command the test does not know (it replaces the package path%s at the end of go test -c)", c, ciPackage)
		default:
			host = append(host, c)
		}
	}
	if len(guest) == 0 {
		return nil, nil, fmt.Errorf("no tinyvmm/bin/tinyvmm line in the recipe %q", cmds)
	}
	return host, guest, nil
}

// readmeRecipe reads the "In CI" recipe of the README at path and sorts
// its lines for testdata/cirecipe's package (splitRecipe).
func readmeRecipe(t *testing.T, path string) (cmds, host, guest []string) {
	t.Helper()
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, err = ciRecipe(string(readme)); err != nil {
		t.Fatal(err)
	}
	if host, guest, err = splitRecipe(cmds, "./netpkg"); err != nil {
		t.Fatal(err)
	}
	return cmds, host, guest
}

func TestCIRecipeParses(t *testing.T) {
	cmds, host, guest := readmeRecipe(t, "../../README.md")
	if !strings.HasSuffix(host[len(host)-1], " ./netpkg") || !strings.Contains(guest[0], "./pkg.test") {
		t.Errorf("recipe %q: host %q, guest %q", cmds, host, guest)
	}
	// CI.md's workflow ends with the same lines.
	ci, err := os.ReadFile("../../CI.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range cmds {
		if !strings.Contains(string(ci), "\n          "+line+"\n") {
			t.Errorf("CI.md's workflow lacks the README's %q", line)
		}
	}
	if _, _, err := splitRecipe([]string{"go test -c -o x.test ./other", "tinyvmm/bin/tinyvmm run -- ./x.test"}, "./netpkg"); err == nil {
		t.Error("a recipe with another package path was accepted")
	}
}

// TestNestedCIRecipe runs README.md's "In CI" recipe as written, its lines
// read from the README, for a package that imports net (a dynamically
// linked test binary without CGO_ENABLED=0): the build lines on this host
// in a project directory with tinyvmm cloned into it (a link to this
// repository), then the tinyvmm line in that directory in the nested L1,
// whose / holds the test binary and the libraries it needs, as a CI
// runner's does: TINYVMM_NESTED=1 go test -run TestNestedCIRecipe -v ./test/nested
func TestNestedCIRecipe(t *testing.T) {
	repo, m := nestedMachine(t, "README's CI recipe in an L1 under QEMU TCG (a minute or two)")
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("no busybox on this host: L1 would have no shell to run the recipe's line")
	}
	_, host, guest := readmeRecipe(t, filepath.Join(repo, "README.md"))

	// The project: the test package, and tinyvmm cloned into it.
	project := t.TempDir()
	if err := os.CopyFS(project, os.DirFS("testdata/cirecipe")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(repo, filepath.Join(project, "tinyvmm")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for _, line := range host {
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir = project
		out, err := cmd.CombinedOutput()
		t.Logf("$ %s\n%s", line, out)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	var bins []string
	filepath.WalkDir(project, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".test") && d.Type().IsRegular() {
			bins = append(bins, p)
		}
		return nil
	})
	if len(bins) != 1 {
		t.Fatalf("the recipe built %q, want one test binary", bins)
	}
	if d, err := readELFDeps(bins[0]); err == nil {
		t.Logf("%s: dynamically linked: %v (it is when a C compiler is here)", filepath.Base(bins[0]), d.Interp != "")
	}

	// L1: the project at the same place under /ci, tinyvmm in it as the
	// clone would be, and the libraries the test binary needs at their
	// own paths, as on the runner.
	work := t.TempDir()
	const ci = "/ci"
	rel, _ := filepath.Rel(project, bins[0])
	files := []File{{Dest: ci + "/" + filepath.ToSlash(rel), Src: bins[0], Mode: 0o755}, {Dest: ci + "/tinyvmm", Link: Repo}}
	libs, err := SharedLibraries(bins[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		files = append(files, File{Dest: lib, Src: lib, Mode: 0o755})
	}
	plan := Plan{ProbeExits: 1000, Commands: []string{"cd " + ci}}
	for _, line := range guest {
		plan.Commands = append(plan.Commands, PlanLine([]string{"sh", "-c", line}))
	}
	l1files, lines, err := Assemble(ctx, repo, work, plan, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	initramfs := writeInitramfsFile(t, work, append(l1files, files...), lines)
	var console strings.Builder
	var mu sync.Mutex
	m.Initramfs, m.Output = initramfs, teeLogger{t, &mu, &console}
	res, err := Boot(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	checkSteps(t, res)
	for _, want := range []string{"--- PASS: TestEchoOverLoopback", "--- PASS: TestInterfacesHaveLoopback"} {
		mu.Lock()
		ok := strings.Contains(console.String(), want)
		mu.Unlock()
		if !ok {
			t.Errorf("the guest's output lacks %q", want)
		}
	}
}

// teeLogger streams L1's console into the test log and keeps it; the
// console's reader and the runner's watch write from two goroutines.
type teeLogger struct {
	t   *testing.T
	mu  *sync.Mutex
	all *strings.Builder
}

func (l teeLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
