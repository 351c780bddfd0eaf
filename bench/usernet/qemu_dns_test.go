package usernetbench

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"tinyvmm/internal/scratchns"
)

// QEMU's guest gets the DNS cell's answers: under TCG (a /dev/kvm may be
// there and unusable), in a namespace of the benchmark's kind, the cell's lookup reaches
// the benchmark's server through QEMU's gateway and the answer comes back.
// A lookup of QEMU's DHCP-given server, 10.0.2.3, failed: libslirp sends
// it to the host's first resolver (outside the namespace) or, with none,
// to 127.0.0.1:53 without passing the answer back.
func TestQEMUAnswersTheDNSCell(t *testing.T) {
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("no qemu-system-x86_64")
	}
	o := Options{QEMU: qemu, QEMUAccel: "tcg", Kernel: "../../out/guest/bzImage", Initrd: "../../out/guest/initramfs.cpio", BootTimeout: 3 * time.Minute}
	for _, f := range []string{o.Kernel, o.Initrd} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("no guest (make guest): %v", err)
		}
	}
	ns, err := scratchns.New("tvbq")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h := &host{}
	var pc net.PacketConn
	if err := ns.Do(func() (err error) { pc, err = net.ListenPacket("udp4", "127.0.0.1:53"); return }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go h.serveDNS(pc)
	out, err := boot(ns, o, "qemu", "echo cell dns && "+dnsLookup()+" && echo BENCH-USERNET-DONE", "", nil)
	h.mu.Lock()
	answered := len(h.dnsTimes)
	h.mu.Unlock()
	if err != nil || answered == 0 {
		t.Fatalf("%v; %d queries answered; console:\n%s", err, answered, tail(out, 15))
	}
	if !strings.Contains(out, "192.0.2.1") {
		t.Errorf("the guest did not print the answer, 192.0.2.1:\n%s", tail(out, 15))
	}
}
