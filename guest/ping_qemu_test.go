package guest

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/scratchns"
)

// The guest and its peer, inside a namespace the test creates.
const (
	peerAddr  = "10.0.2.1"
	guestAddr = "10.0.2.15"
	guestIP   = "ip=" + guestAddr + "::" + peerAddr + ":255.255.255.0::eth0:off"
	tapName   = "tap0"
)

// newNetns creates a network namespace with a tap at peerAddr in it; both
// go when the test ends (the namespace is anonymous, so even a killed test
// leaves nothing). It skips when it cannot.
func newNetns(t *testing.T) *scratchns.NS {
	t.Helper()
	ns := netnstest.Setup(t)
	if _, err := ns.AddTap(tapName, peerAddr+"/24"); err != nil {
		t.Fatal(err)
	}
	return ns
}

// runIn runs cmd inside ns and returns its combined output.
func runIn(ns *scratchns.NS, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := ns.Do(cmd.Start); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}

// TestQEMUKernelAnswersPing is the kernel-only check that also runs under
// PVM: the kernel configures eth0 from ip= (virtio-net over virtio-pci with
// MSI-X) and answers ping while /init loops without system calls.
func TestQEMUKernelAnswersPing(t *testing.T) {
	a := needArtifacts(t)
	ns := newNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), tcgBootTimeout)
	defer cancel()

	vm := startQEMU(t, ns,
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
		ping := exec.CommandContext(ctx, "ping", "-c", "1", "-W", "1", guestAddr)
		if _, err := runIn(ns, ping); err == nil {
			firstReply = time.Since(vm.started)
			break
		}
		time.Sleep(time.Until(vm.started.Add(time.Duration(attempt+1) * time.Second)))
	}

	out, err := runIn(ns, exec.CommandContext(ctx, "ping", "-c", "5", "-i", "0.2", "-W", "2", guestAddr))
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
