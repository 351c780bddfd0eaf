package scratchns_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
)

func TestNamespaceWithTapIsIsolated(t *testing.T) {
	n := netnstest.Setup(t)
	mac, err := n.AddTap("tap0", "10.0.2.1/24")
	if err != nil {
		t.Fatal(err)
	}
	if len(mac) != 6 {
		t.Errorf("tap mac %v", mac)
	}
	var inside []string
	if err := n.Do(func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			inside = append(inside, l.Attrs().Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.AddVeth("va", "vb"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(inside, ",") != "lo,tap0" {
		t.Errorf("links inside %v, want lo and tap0", inside)
	}
	// A socket opened inside is bound to the namespace's address.
	var fd int
	if err := n.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{10, 0, 2, 1}})
	}); err != nil {
		t.Fatalf("bind to 10.0.2.1 inside: %v", err)
	}
	unix.Close(fd)
}

// runNetns lists /run/netns (nothing when it does not exist).
func runNetns(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// heldBy lists what in this process refers to the network namespace whose
// nsfs link is ns ("net:[4026532...]"): fds, and threads inside it.
func heldBy(t *testing.T, ns string) []string {
	t.Helper()
	var refs []string
	fds, _ := filepath.Glob("/proc/self/fd/*")
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, p := range append(fds, tasks...) {
		if l, err := os.Readlink(p); err == nil && l == ns {
			refs = append(refs, p)
		}
	}
	return refs
}

// TestNamespaceIsAnonymous: the namespace has no /run/netns entry (so
// nothing can outlive the process), and after Close the process holds no
// reference to it, so the kernel removes it with its tap.
func TestNamespaceIsAnonymous(t *testing.T) {
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
	before := runNetns(t)
	n, err := scratchns.New("tvt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddTap("tap0", "10.0.2.1/24"); err != nil {
		n.Close()
		t.Fatal(err)
	}
	var id string
	if err := n.Do(func() error {
		id, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if now := runNetns(t); now != before {
		t.Errorf("/run/netns: %q while the namespace lives, was %q", now, before)
	}
	if len(heldBy(t, id)) == 0 {
		t.Fatalf("nothing in the process holds %s before Close", id)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if refs := heldBy(t, id); len(refs) > 0 {
		t.Errorf("%s still held by %v after Close", id, refs)
	}
	if err := n.Do(func() error { return nil }); err == nil {
		t.Error("Do after Close succeeded")
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestKilledProcessLeavesNothing: a process killed with SIGKILL while its
// namespace (with a persistent tap) exists leaves no namespace behind.
func TestKilledProcessLeavesNothing(t *testing.T) {
	if os.Getenv("SCRATCHNS_CHILD") == "1" {
		n, err := scratchns.New("tvkill")
		if err == nil {
			_, err = n.AddTap("tap0", "10.0.2.1/24")
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("ready")
		time.Sleep(time.Minute) // killed long before
		os.Exit(1)
	}
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
	before := runNetns(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledProcessLeavesNothing$")
	cmd.Env = append(os.Environ(), "SCRATCHNS_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill() // our own child, by PID
	cmd.Wait()
	if line != "ready\n" {
		t.Fatalf("child: %q", line)
	}
	if now := runNetns(t); now != before {
		t.Errorf("/run/netns after the kill: %q, was %q", now, before)
	}
}
