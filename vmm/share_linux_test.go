package vmm

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tinyvmm/internal/scratchns"
	"tinyvmm/kvm"
)

// These run the tinyvmm binary the way a user does (`tinyvmm run ...`),
// against the default guest, where KVM runs Linux user space: in the
// nested L1, /repo/tinyvmm beside this test's /repo/vmm. They run it as a
// non-root user (rootless_linux_test.go): nothing here needs root.

// tinyvmmCLI finds the tinyvmm binary ($TINYVMM_BIN, or ../tinyvmm, or
// ../bin/tinyvmm) and the default guest, or skips.
func tinyvmmCLI(t *testing.T) string {
	t.Helper()
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	if h.PVM {
		t.Skip("host KVM is PVM: guest user space cannot make system calls here")
	}
	guestFile(t, "vmlinux")
	guestFile(t, "initramfs.cpio")
	for _, p := range []string{os.Getenv("TINYVMM_BIN"), filepath.Join("..", "tinyvmm"), filepath.Join("..", "bin", "tinyvmm")} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if fi, err := os.Stat(abs); err == nil && fi.Mode().IsRegular() {
				return abs
			}
		}
	}
	t.Skip("no tinyvmm binary (../tinyvmm or ../bin/tinyvmm): run make build")
	return ""
}

// runCLI runs tinyvmm in dir as a non-root user (unprivileged) and returns
// its status, stdout and stderr.
func runCLI(t *testing.T, bin, dir string, args ...string) (int, string, string) {
	t.Helper()
	status, stdout, stderr, err := startCLI(t, nil, bin, dir, args...)()
	if err != nil {
		t.Fatal(err)
	}
	return status, stdout, stderr
}

// startCLI starts tinyvmm in dir as a non-root user (unprivileged), inside
// ns when it is given, and returns the function that waits for it. The
// waiting function only logs, so it may be called from any goroutine.
func startCLI(t *testing.T, ns *scratchns.NS, bin, dir string, args ...string) func() (int, string, string, error) {
	t.Helper()
	guestDir, _ := filepath.Abs(filepath.Join("..", "out", "guest"))
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
	cmd.Env = append(os.Environ(), "TINYVMM_GUEST_DIR="+guestDir)
	if cred := unprivileged(t); cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	start := time.Now()
	var err error
	if ns != nil {
		err = ns.Do(cmd.Start) // the child gets the namespace of the thread that forks it
	} else {
		err = cmd.Start()
	}
	return func() (int, string, string, error) {
		if err != nil {
			return 0, "", "", err
		}
		err := cmd.Wait()
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		} else if err != nil {
			return 0, "", "", err
		}
		t.Logf("tinyvmm %s (uid %d): status %d after %v\nstderr: %s", strings.Join(args, " "), uidOf(cmd), status, time.Since(start).Round(time.Millisecond), stderr.String())
		return status, stdout.String(), stderr.String(), nil
	}
}

// TestLinuxGuestShare: the guest reads a host file from a share and writes
// one back, in the directory tinyvmm was started in.
func TestLinuxGuestShare(t *testing.T) {
	bin := tinyvmmCLI(t)
	dir := userDir(t)
	if err := os.WriteFile(filepath.Join(dir, "host.txt"), []byte("written by the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	status, out, _ := runCLI(t, bin, dir, "run", "--share", dir, "--",
		"sh", "-c", "pwd; cat host.txt && mkdir -p sub && echo written by the guest > sub/guest.txt && ln -s /etc escape && ls escape/ >/dev/null")
	if status != 0 {
		t.Fatalf("status %d; console:\n%s", status, out)
	}
	if !strings.Contains(out, dir+"\r\n") && !strings.Contains(out, dir+"\n") {
		t.Errorf("the command did not run in %s:\n%s", dir, out)
	}
	if !strings.Contains(out, "written by the host") {
		t.Errorf("the guest did not read the host's file:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "guest.txt")); err != nil || string(b) != "written by the guest\n" {
		t.Errorf("guest's file on the host: %q, %v", b, err)
	}
	// The guest's symlink is stored as it is; the guest resolves it in its own tree.
	if target, err := os.Readlink(filepath.Join(dir, "escape")); err != nil || target != "/etc" {
		t.Errorf("symlink on the host: %q, %v", target, err)
	}
}

// TestLinuxGuestShareCache: what each --share-cache policy promises. Under
// auto (the default), a file the host rewrites while the guest runs is
// read anew at the guest's next open, even at the same size (no pages kept
// across opens); under both, what the guest writes is on the host when the
// write returns, and the guest reads its own write back.
func TestLinuxGuestShareCache(t *testing.T) {
	bin := tinyvmmCLI(t)
	for _, policy := range []string{"auto", "always"} {
		t.Run(policy, func(t *testing.T) {
			dir := userDir(t)
			f := filepath.Join(dir, "f.txt")
			if err := os.WriteFile(f, []byte("old-content\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			// The guest reads f, says so with a file, waits for the
			// host's go (up to 5 minutes), reads f again, writes w.
			script := "cat f.txt && touch ready && i=0 && while [ ! -e go ] && [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done && " +
				"cat f.txt && echo guest-wrote > w.txt && cat w.txt"
			wait := startCLI(t, nil, bin, dir, "run", "--share", dir, "--share-cache="+policy, "--timeout", "10m", "--", "sh", "-c", script)
			deadline := time.Now().Add(5 * time.Minute)
			for {
				if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					break // the guest's failure shows below
				}
				time.Sleep(100 * time.Millisecond)
			}
			// In place, same size: only a reread sees it.
			if err := os.WriteFile(f, []byte("new-content\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			status, out, _, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			if status != 0 || !strings.Contains(out, "old-content") || !strings.Contains(out, "guest-wrote") {
				t.Fatalf("status %d; console:\n%s", status, out)
			}
			if policy == "auto" && !strings.Contains(out, "new-content") {
				t.Errorf("the guest did not see the host's change at its next open:\n%s", out)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "w.txt")); err != nil || string(b) != "guest-wrote\n" {
				t.Errorf("the guest's write on the host: %q, %v", b, err)
			}
		})
	}
}

// TestLinuxGuestRunsGoTestFromShare is the CI use case: a compiled Go test
// binary (this very one) runs from the share, in the working directory.
func TestLinuxGuestRunsGoTestFromShare(t *testing.T) {
	bin := tinyvmmCLI(t)
	dir := userDir(t)
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	dst, err := os.OpenFile(filepath.Join(dir, "pkg.test"), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, self); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	status, out, _ := runCLI(t, bin, dir, "run", "--share", dir, "--", "./pkg.test", "-test.v", "-test.run", "^TestGuestWorkDir$")
	if status != 0 || !strings.Contains(out, "--- PASS: TestGuestWorkDir") {
		t.Fatalf("status %d; console:\n%s", status, out)
	}
}

// TestLinuxGuestExitStatuses: a kernel panic, no init, a triple fault and
// a timeout each give their own status and one line on stderr.
func TestLinuxGuestExitStatuses(t *testing.T) {
	bin := tinyvmmCLI(t)
	dir := userDir(t)
	triple := filepath.Join(dir, "triple.elf")
	if err := os.WriteFile(triple, tinyELF(tripleFault, true), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		args   []string
		status int
		line   string
	}{
		{"panic", []string{"run", "--append", "rdinit=/bin/true", "--", "true"}, 121, "tinyvmm: guest kernel panic: Attempted to kill init!"},
		{"no init", []string{"run", "--append", "rdinit=/nonexistent init=/nonexistent", "--", "true"}, 122, "tinyvmm: guest kernel found no init to run: Requested init /nonexistent failed"},
		{"triple fault", []string{"run", "--kernel", triple}, 123, "tinyvmm: guest triple-faulted"},
		{"timeout", []string{"run", "--timeout", "4s", "--", "sleep", "600"}, 124, "tinyvmm: guest still running after 4s (--timeout); stopped it"},
		{"command's own status", []string{"run", "--timeout", "5m", "--", "sh", "-c", "exit 3"}, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out, stderr := runCLI(t, bin, dir, c.args...)
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if strings.HasPrefix(l, "tinyvmm: ") && !strings.Contains(l, "PVM") {
					lines = append(lines, l)
				}
			}
			if status != c.status {
				t.Fatalf("status %d, want %d; console:\n%s", status, c.status, tail(out, 30))
			}
			if c.line == "" {
				if len(lines) != 0 {
					t.Errorf("stderr %q, want nothing", stderr)
				}
				return
			}
			if len(lines) != 1 || !strings.HasPrefix(lines[0], c.line) {
				t.Errorf("stderr %q, want one line starting %q", stderr, c.line)
			}
		})
	}
}

// TestLinuxGuestHostRoot: --root / boots the guest on the host's own root
// (L1's, in the nested run) and runs a dynamically linked program of the
// host's, tinyvmm itself run by a non-root user with /dev/kvm through its
// group. The guest's writes outside the working directory go to its
// overlay; the working directory is the host's, writable; /proc is the
// guest's own.
func TestLinuxGuestHostRoot(t *testing.T) {
	bin := tinyvmmCLI(t)
	prog := dynamicProgram(t)
	dir := userDir(t)
	marker := "/tinyvmm-root-test-" + filepath.Base(dir)
	script := strings.Join([]string{
		prog + " --version",
		"echo overlay > " + marker, "cat " + marker,
		"pwd", "echo through > result",
		"grep MemTotal /proc/meminfo",
	}, " && ")
	status, out, stderr := runCLI(t, bin, dir, "run", "--root", "/", "--mem", "384M", "--timeout", "10m", "--", "sh", "-c", script)
	if status != 0 {
		t.Fatalf("status %d; console:\n%s\nstderr:\n%s", status, out, stderr)
	}
	if !strings.Contains(out, "version") && !strings.Contains(out, "Version") {
		t.Errorf("%s --version printed no version:\n%s", prog, out)
	}
	if !strings.Contains(out, "overlay") {
		t.Errorf("the guest could not write its root:\n%s", out)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the guest's write to %s reached the host: %v", marker, err)
		os.Remove(marker)
	}
	if !strings.Contains(out, dir+"\r\n") && !strings.Contains(out, dir+"\n") {
		t.Errorf("the command did not run in %s:\n%s", dir, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "result")); err != nil || string(b) != "through\n" {
		t.Errorf("the guest's file in the working directory, on the host: %q, %v", b, err)
	}
	// 384M of guest memory, not the host's: the guest's own /proc.
	var kb int
	if i := strings.Index(out, "MemTotal:"); i < 0 {
		t.Errorf("no MemTotal:\n%s", out)
	} else if fmt.Sscan(out[i+len("MemTotal:"):], &kb); kb <= 0 || kb > 400<<10 {
		t.Errorf("the guest's /proc/meminfo says %d kB: not the guest's", kb)
	}
}

// dynamicProgram finds a dynamically linked executable on the host (QEMU
// in the nested run with -with-qemu), or skips.
func dynamicProgram(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh on the host to script the guest with")
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH") + ":/usr/bin:/usr/local/bin") {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o005 != 0o005 {
				continue
			}
			f, err := elf.Open(p)
			if err != nil {
				continue
			}
			dynamic := false
			for _, prog := range f.Progs {
				dynamic = dynamic || prog.Type == elf.PT_INTERP
			}
			f.Close()
			if dynamic && (e.Name() == "qemu-system-x86_64" || strings.HasPrefix(dir, "/usr")) {
				return p
			}
		}
	}
	t.Skip("no dynamically linked program on the host (the nested runner's -with-qemu brings QEMU)")
	return ""
}

// TestLinuxGuestShareQueues: with 2 vCPUs, a reader on each CPU sends its
// requests on a request queue of its own (the default guest's kernel maps
// each CPU to the queue whose interrupt it takes), as the device's
// per-queue counts show; and a sequential read goes in READs of up to
// 1 MiB, which takes the share's 4 MiB readahead window (FUSE's own is
// 128 KiB: 32 READs for the 4 MiB file).
func TestLinuxGuestShareQueues(t *testing.T) {
	bin := tinyvmmCLI(t)
	dir := userDir(t)
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, f), bytes.Repeat([]byte(f), 4<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	statsFile := filepath.Join(dir, "stats.json")
	status, out, _ := runCLI(t, bin, dir, "run", "--cpus", "2", "--stats="+statsFile, "--share", dir+":/mnt", "--",
		"sh", "-c", "taskset -c 0 dd if=/mnt/a of=/dev/null bs=1M 2>/dev/null && taskset -c 1 dd if=/mnt/b of=/dev/null bs=1M 2>/dev/null")
	if status != 0 {
		t.Fatalf("status %d; console:\n%s", status, out)
	}
	raw, err := os.ReadFile(statsFile)
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Shares []struct {
			Queues []uint64
			Ops    map[string]uint64
		}
	}
	if err := json.Unmarshal(raw, &stats); err != nil || len(stats.Shares) != 1 {
		t.Fatalf("stats %s: %v", raw, err)
	}
	q := stats.Shares[0].Queues
	if len(q) != 3 || q[1] == 0 || q[2] == 0 {
		t.Errorf("requests per queue (hiprio, then request queues) %v: want both request queues used", q)
	}
	if n := stats.Shares[0].Ops["READ"]; n == 0 || n > 16 {
		t.Errorf("%d READs for two 4 MiB files: want READs of up to 1 MiB (the readahead window is 128 KiB?)", n)
	}
}
