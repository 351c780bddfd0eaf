package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The guest and its peer, inside a namespace the test creates.
const (
	peerAddr  = "10.0.2.1"
	guestAddr = "10.0.2.15"
	guestIP   = "ip=" + guestAddr + "::" + peerAddr + ":255.255.255.0::eth0:off"
	tapName   = "tap0"
)

// newNetns creates a network namespace with a tap in it and removes both
// when the test ends, failed or not. It skips when it cannot.
func newNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (apt-get install iproute2)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	ns := fmt.Sprintf("tinyvmm-guest-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() {
		exec.Command("ip", "-n", ns, "link", "del", tapName).Run()
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("removing namespace %s: %v: %s", ns, err, out)
		}
	})
	run("-n", ns, "link", "set", "lo", "up")
	run("-n", ns, "tuntap", "add", "dev", tapName, "mode", "tap")
	run("-n", ns, "addr", "add", peerAddr+"/24", "dev", tapName)
	run("-n", ns, "link", "set", tapName, "up")
	return ns
}

// TestQEMUKernelAnswersPing is the kernel-only check that also runs under
// PVM: the kernel configures eth0 from ip= (virtio-net over virtio-pci with
// MSI-X) and answers ping while /init loops without system calls.
func TestQEMUKernelAnswersPing(t *testing.T) {
	a := needArtifacts(t)
	ns := newNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), tcgBootTimeout)
	defer cancel()

	vm := startQEMU(t, []string{"ip", "netns", "exec", ns},
		"-M", "pc", "-m", "256M", "-smp", "1",
		"-kernel", a.vmlinux, "-initrd", a.pauseInitramfs,
		"-append", tcgCmdline+" "+guestIP,
		"-netdev", "tap,id=n0,ifname="+tapName+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56")

	// One ping a second, bounded by the boot timeout.
	var firstReply time.Duration
	for attempt := 0; firstReply == 0; attempt++ {
		select {
		case <-ctx.Done():
			t.Fatalf("no ping reply from %s after %d attempts: %v", guestAddr, attempt, ctx.Err())
		case <-vm.done:
			t.Fatalf("QEMU exited before the guest answered ping: %v", vm.err)
		default:
		}
		ping := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", guestAddr)
		if ping.Run() == nil {
			firstReply = time.Since(vm.started)
			break
		}
		time.Sleep(time.Until(vm.started.Add(time.Duration(attempt+1) * time.Second)))
	}

	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns,
		"ping", "-c", "5", "-i", "0.2", "-W", "2", guestAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("ping after the first reply: %v: %s", err, out)
	}
	rtt := "?"
	if m := regexp.MustCompile(`rtt min/avg/max/mdev = (\S+)`).FindSubmatch(out); m != nil {
		rtt = string(m[1])
	}
	console := vm.console.String()
	ipConfig, _ := kernelTime(console, "IP-Config: Complete")
	runInit, _ := kernelTime(console, "Run /init")
	t.Logf("TCG pc + virtio-net-pci: first ping reply %.1fs after QEMU started; kernel: IP-Config done %.2fs, /init %.2fs; rtt min/avg/max/mdev %s ms",
		firstReply.Seconds(), ipConfig, runInit, rtt)
}
