package vmm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tinyvmm/internal/netnstest"
	"tinyvmm/internal/syncbuf"
	"tinyvmm/kvm"
	"tinyvmm/virtionet"
)

// TestLinuxGuestMultiQueue boots a 2-vCPU guest on a multi-queue tap with
// the default number of queue pairs (one per vCPU): Linux's virtio_net
// negotiates MQ, asks for 2 pairs on the control queue and shows rx-0,
// rx-1, tx-0 and tx-1. Two pings, each pinned to one vCPU, are two flows:
// each goes out on its CPU's tx queue (XPS) and the tap sends its replies
// back on the queue the flow came from, so both pairs' counters move.
func TestLinuxGuestMultiQueue(t *testing.T) {
	h := kvm.Detect()
	if !h.Usable {
		t.Skip(h.Why)
	}
	if h.PVM {
		t.Skip("host KVM is PVM: guest user space cannot make system calls here")
	}
	kernel, initrd := guestFile(t, "vmlinux"), guestFile(t, "initramfs.cpio")
	ns := netnstest.Setup(t)
	if _, err := ns.AddMultiQueueTap("tvmq0", "10.0.2.1/24"); err != nil {
		t.Fatal(err)
	}
	var nc NetConfig
	nc.Ifname = "tvmq0"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var console, log syncbuf.Buffer
	var status int
	var runErr error
	statsFile := filepath.Join(t.TempDir(), "stats.json")
	ns.Do(func() error {
		status, runErr = Run(ctx, Config{
			Kernel: kernel, Initrd: initrd, MemBytes: 256 << 20, CPUs: 2, Nets: []NetConfig{nc},
			Cmdline: "ip=10.0.2.15::10.0.2.1:255.255.255.0::eth0:off",
			Command: []string{"sh", "-c", "echo queues: $(ls /sys/class/net/eth0/queues); " +
				"taskset 1 ping -c 4 -i 0.3 -W 5 10.0.2.1 & taskset 2 ping -c 4 -i 0.3 -W 5 10.0.2.1; wait; " +
				"grep virtio /proc/interrupts"},
			Console: &console, Log: &log, Stats: statsFile,
		})
		return nil
	})
	out := console.String()
	t.Logf("console:\n%s", tail(out, 20))
	if runErr != nil || status != 0 {
		t.Fatalf("exited %d, err %v\nconsole:\n%s\nlog:\n%s", status, runErr, tail(out, 40), log.String())
	}
	if !regexp.MustCompile(`queues: rx-0 rx-1 tx-0 tx-1\b`).MatchString(out) {
		t.Errorf("eth0 does not show 2 combined channels:\n%s", tail(out, 40))
	}
	if n := strings.Count(out, "4 packets received"); n != 2 {
		t.Errorf("%d pings got all 4 replies, want 2:\n%s", n, tail(out, 40))
	}
	raw, err := os.ReadFile(statsFile)
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Nets []virtionet.Stats `json:"nets"`
	}
	if err := json.Unmarshal(raw, &stats); err != nil || len(stats.Nets) != 1 {
		t.Fatalf("stats %s: %v", raw, err)
	}
	s := stats.Nets[0]
	if len(s.Pairs) != 2 || s.AskedPairs != 2 || s.Ctrl == nil || s.Ctrl.Commands == 0 || s.Ctrl.Errors != 0 {
		t.Fatalf("want 2 pairs asked for with a good VQ_PAIRS_SET: %d pairs, %d asked, control %+v\n%s", len(s.Pairs), s.AskedPairs, s.Ctrl, raw)
	}
	for _, p := range s.Pairs {
		rx, tx := p.Queues[0], p.Queues[1]
		if rx.Frames == 0 || tx.Frames == 0 {
			t.Errorf("pair %d: rx %d tx %d frames; want traffic on both pairs\n%s", p.Pair, rx.Frames, tx.Frames, tail(out, 20))
		}
		t.Logf("pair %d: rx %d frames %d interrupts, tx %d frames %d kicks", p.Pair, rx.Frames, rx.Interrupts, tx.Frames, tx.Kicks)
	}
	t.Logf("%s", strings.TrimSpace(log.String()))
}
