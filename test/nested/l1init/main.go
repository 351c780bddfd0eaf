// Command l1init is /init of the nested L1 machine: a Linux with KVM that runs
// under QEMU TCG, so that tinyvmm gets a real /dev/kvm on a host without one.
//
// It mounts the pseudo file systems (devpts too, for tests that need a
// terminal, and debugfs where the kernel has it), then runs the steps listed in /plan, one command per line (words
// split on spaces; "cd DIR" changes the directory of the steps that follow;
// '#' starts a comment). The output goes to the
// console. It ends with one marker line that the runner on the host parses:
//
//	NESTED-EXIT <status>
//
// where status is 0 when every step exited 0, and then reboots; QEMU runs
// with -no-reboot, so that ends the run.
//
// A step written "!CMD" is a gate: when it fails, l1init prints RetryMarker
// and reboots at once, and the run fails without the rest of the plan.
// kvmprobe is the gate: a KVM that cannot enter a guest (L1's TSC trap in
// test/nested/README.md) would only make every test after it fail.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ExitMarker starts the last line l1init prints; the runner parses it.
const ExitMarker = "NESTED-EXIT "

// RetryMarker is printed when a gate step failed (the name is historical:
// the runner no longer boots L1 again).
const RetryMarker = "NESTED-RETRY"

// StepMarker starts the line l1init prints after each step.
const StepMarker = "NESTED-STEP "

// OutMarker starts each line a step that is not a gate prints, when L1's
// command line has MarkParam (tinyvmm-lab nested -log): the runner shows
// those lines, and only those, to its user, apart from L1's boot, its
// kernel's messages (which may come in the middle of a step) and its own
// lines. Without MarkParam a step writes to the console directly.
const OutMarker = "NESTED-OUT "

// MarkParam on L1's command line turns OutMarker on.
const MarkParam = "l1init.mark=1"

func main() {
	status, retry := run()
	if retry {
		fmt.Println(RetryMarker)
	} else {
		fmt.Printf("%s%d\n", ExitMarker, status)
	}
	unix.Sync()
	// Restart is what QEMU's -no-reboot turns into an exit; power-off would
	// need ACPI, which the kernel may not have.
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		fmt.Println("l1init: reboot:", err)
	}
	select {}
}

// run returns the overall status, and whether a gate failed.
func run() (int, bool) {
	if err := mountAll(); err != nil {
		fmt.Println("l1init:", err)
		return 125, false
	}
	if err := quietConsole("/proc/sys/kernel/printk"); err != nil {
		fmt.Println("l1init:", err)
	}
	os.Setenv("PATH", "/bin:/sbin:/usr/bin")
	os.Setenv("HOME", "/tmp")
	os.Setenv("TMPDIR", "/tmp")
	os.Setenv("TINYVMM_NESTED_L1", "1") // tests that cannot run in this L1 skip on it
	describeHost()
	if err := kvmToGroup(); err != nil {
		fmt.Println("l1init:", err)
	}
	if err := setUpNetwork(); err != nil {
		fmt.Println("l1init:", err)
	}
	if cmdline, _ := os.ReadFile("/proc/cmdline"); strings.Contains(string(cmdline), "l1init.pit=0") {
		fmt.Println("l1init: no periodic PIT (l1init.pit=0)")
	} else if err := startPIT(); err != nil {
		fmt.Println("l1init: no periodic PIT (a lost interrupt will stall L1 until the runner wakes it):", err)
	} else {
		fmt.Printf("l1init: the PIT interrupts L1 %d times a second (IRQ 0 so far: %d)\n", PITHz, pitInterrupts())
		defer func() { fmt.Printf("l1init: IRQ 0 (the PIT) taken %d times\n", pitInterrupts()) }()
	}

	plan, err := os.ReadFile("/plan")
	if err != nil {
		fmt.Println("l1init: no /plan in the initramfs:", err)
		return 125, false
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	mark := slices.Contains(strings.Fields(string(cmdline)), MarkParam)
	status := 0
	for n, line := range strings.Split(string(plan), "\n") {
		words, err := planWords(line)
		if err != nil {
			fmt.Printf("l1init: plan line %d: %v\n", n+1, err)
			status = 125
			continue
		}
		if len(words) == 0 {
			continue
		}
		if words[0] == "cd" && len(words) == 2 {
			if err := os.Chdir(words[1]); err != nil {
				fmt.Printf("l1init: plan line %d: %v\n", n+1, err)
				status = 125
			}
			continue
		}
		gate := strings.HasPrefix(words[0], "!")
		words[0] = strings.TrimPrefix(words[0], "!")
		code, elapsed := runStep(words, mark && !gate)
		fmt.Printf("%sstatus=%d seconds=%.1f cmd=%s\n", StepMarker, code, elapsed.Seconds(), strings.Join(words, " "))
		if gate && code != 0 {
			return code, true
		}
		if code != 0 && status == 0 {
			status = code
		}
	}
	return status, false
}

// planWords splits a plan line: a JSON array of words (what the runner
// writes when a word holds a space, a quote or a '#'), or words apart by
// spaces with '#' starting a comment.
func planWords(line string) ([]string, error) {
	if strings.HasPrefix(strings.TrimSpace(line), "[") {
		var words []string
		if err := json.Unmarshal([]byte(line), &words); err != nil {
			return nil, err
		}
		return words, nil
	}
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	return strings.Fields(line), nil
}

// runStep runs one step; with mark, each line it prints goes to the
// console after OutMarker.
func runStep(words []string, mark bool) (int, time.Duration) {
	start := time.Now()
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	var marked *lineMarker
	if mark {
		// One writer for both: exec then writes from one goroutine at a
		// time. WaitDelay: a process the step left behind holding the
		// pipe does not hold up the plan.
		marked = &lineMarker{w: os.Stdout}
		cmd.Stdout, cmd.Stderr = marked, marked
		cmd.WaitDelay = 5 * time.Second
	}
	err := cmd.Run()
	if marked != nil {
		marked.Flush()
	}
	elapsed := time.Since(start)
	if err == nil {
		return 0, elapsed
	}
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() > 0 {
		return exit.ExitCode(), elapsed
	}
	fmt.Printf("l1init: %s: %v\n", words[0], err)
	return 126, elapsed
}

// lineMarker writes each line written to it to w after OutMarker.
type lineMarker struct {
	w    io.Writer
	part []byte
}

func (m *lineMarker) Write(p []byte) (int, error) {
	m.part = append(m.part, p...)
	for {
		i := bytes.IndexByte(m.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := fmt.Fprintf(m.w, "%s%s\n", OutMarker, m.part[:i]); err != nil {
			return 0, err
		}
		m.part = m.part[i+1:]
	}
}

// Flush writes a last line that has no newline.
func (m *lineMarker) Flush() {
	if len(m.part) > 0 {
		fmt.Fprintf(m.w, "%s%s\n", OutMarker, m.part)
		m.part = nil
	}
}

func mountAll() error {
	if err := rootOnAMount(); err != nil {
		fmt.Println("l1init: the root stays the initial ramfs (no pivot_root, no user namespaces in L1):", err)
	}
	mounts := []struct{ fs, dir string }{
		{"devtmpfs", "/dev"}, {"devpts", "/dev/pts"}, {"proc", "/proc"}, {"sysfs", "/sys"}, {"tmpfs", "/tmp"}, {"tmpfs", "/run"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fs, m.dir, m.fs, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s on %s: %v", m.fs, m.dir, err)
		}
	}
	// debugfs has KVM's per-VM counters (/sys/kernel/debug/kvm/PID-FD/),
	// which bench e2e reads; a kernel without CONFIG_DEBUG_FS only leaves
	// its runs without them.
	if err := unix.Mount("debugfs", "/sys/kernel/debug", "debugfs", 0, ""); err != nil && err != unix.EBUSY {
		fmt.Println("l1init: no debugfs:", err)
	}
	// ip netns wants /run/netns; loopback is brought up by the tests that need it.
	return os.MkdirAll("/run/netns", 0o755)
}

// rootOnAMount makes the root a mount of its own over the initial ramfs,
// as switch_root does: the kernel refuses pivot_root on the ramfs itself
// and counts a process whose root is not its namespace's as chrooted,
// which may not make a user namespace; so programs that sandbox
// themselves with both (passt, bench usernet's qemu-passt) could not run
// in L1. The new root is a bind of the ramfs: the same files.
func rootOnAMount() error {
	const dir = "/.root"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("/", dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind / on %s: %v", dir, err)
	}
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s over /: %v", dir, err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return unix.Chdir("/")
}

// KVMGroup is the group l1init gives /dev/kvm to, read-write (0660), as
// the README's udev rule does on a CI runner: the vmm tests run tinyvmm as
// a non-root user in that group, to show that run needs no root.
const KVMGroup = 36

func kvmToGroup() error {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return nil
	}
	if err := os.Chown("/dev/kvm", 0, KVMGroup); err != nil {
		return err
	}
	if err := os.Chmod("/dev/kvm", 0o660); err != nil {
		return err
	}
	// Names for ls -l and id; nothing else reads them.
	os.MkdirAll("/etc", 0o755)
	os.WriteFile("/etc/group", []byte(fmt.Sprintf("root:x:0:\nkvm:x:%d:ci\nci:x:1000:\n", KVMGroup)), 0o644)
	os.WriteFile("/etc/passwd", []byte("root:x:0:0:root:/tmp:/bin/sh\nci:x:1000:1000:ci:/tmp:/bin/sh\n"), 0o644)
	fmt.Printf("l1init: /dev/kvm is root:kvm (gid %d) 0660\n", KVMGroup)
	return nil
}

// consoleLevel is the console log level of L1's kernel while the plan
// runs: warnings and worse still reach the console (a KVM splat, a
// hung task), notices and information stay in dmesg. The steps' output
// shares the console, and a notice printed during a step lands inside it:
// "random: crng init done", late under TCG, once broke the JSON of a
// bench run (bench/nested.sh) in the middle of its cat.
const consoleLevel = 5

// quietConsole sets the console's log level in printk (the file
// /proc/sys/kernel/printk; its first field), leaving the other three.
func quietConsole(printk string) error {
	b, err := os.ReadFile(printk)
	if err != nil {
		return fmt.Errorf("console log level: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 4 {
		return fmt.Errorf("console log level: %s has %q", printk, b)
	}
	f[0] = strconv.Itoa(consoleLevel)
	if err := os.WriteFile(printk, []byte(strings.Join(f, " ")), 0); err != nil {
		return fmt.Errorf("console log level: %v", err)
	}
	return nil
}

// describeHost prints what the runner's report needs: uptime at init and
// whether KVM came up (with the CPU's virtualization flags when it did not).
func describeHost() {
	if up, err := os.ReadFile("/proc/uptime"); err == nil {
		fmt.Printf("l1init: kernel reached init after %s s\n", strings.Fields(string(up))[0])
	}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		fmt.Println("l1init: /dev/kvm present")
		return
	}
	fmt.Println("l1init: /dev/kvm missing; cpu flags:", virtFlags())
}

func virtFlags() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "flags") && !strings.HasPrefix(line, "vendor_id") {
			continue
		}
		var keep []string
		for _, w := range strings.Fields(line) {
			switch w {
			case "svm", "vmx", "npt", "nrip_save", "nx", "AuthenticAMD", "GenuineIntel":
				keep = append(keep, w)
			}
		}
		if strings.HasPrefix(line, "flags") {
			return strings.Join(keep, " ")
		}
		fmt.Print("vendor ", strings.Join(keep, " "), "; ")
	}
	return "(no flags line)"
}
