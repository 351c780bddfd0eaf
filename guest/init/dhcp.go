package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// dhcpScript is what busybox udhcpc runs with the lease in its environment
// (ip, mask, router, dns, mtu, interface): it configures the interface, the
// default route and /etc/resolv.conf.
const dhcpScript = `#!/bin/sh
case "$1" in
deconfig)
	ip addr flush dev "$interface"
	ip link set "$interface" up
	;;
bound|renew)
	ip addr flush dev "$interface"
	ip addr add "$ip/${mask:-24}" dev "$interface"
	[ -n "$mtu" ] && ip link set "$interface" mtu "$mtu"
	for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
	: >/etc/resolv.conf
	for d in $dns; do echo "nameserver $d" >>/etc/resolv.conf; done
	;;
esac
exit 0
`

const dhcpScriptPath = "/etc/udhcpc.script"

// udhcpcArgs ask for a lease in the foreground and quit once it is bound;
// without an answer after 3 discovers, 1 s apart, they give up (-n), so a
// tap with no DHCP server delays the boot by 3 s: give ip= there.
var udhcpcArgs = []string{"udhcpc", "-i", "eth0", "-f", "-q", "-n", "-t", "3", "-T", "1", "-s", dhcpScriptPath}

// configureByDHCP runs udhcpc on eth0 and waits for the lease. Its chatter
// is shown only when it fails.
func configureByDHCP() error {
	path, err := exec.LookPath("udhcpc")
	if err != nil {
		return fmt.Errorf("dhcp on eth0: %w", err)
	}
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("dhcp on eth0: %w", err)
	}
	if err := os.WriteFile(dhcpScriptPath, []byte(dhcpScript), 0o755); err != nil {
		return fmt.Errorf("dhcp on eth0: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("dhcp on eth0: %w", err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("dhcp on eth0: %w", err)
	}
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&out, io.LimitReader(r, 64<<10))
		io.Copy(io.Discard, r)
		close(copied)
	}()
	proc, err := os.StartProcess(path, udhcpcArgs, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{null, w, w}})
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("dhcp on eth0: %w", err)
	}
	pid := proc.Pid
	proc.Release()
	status := waitReaping(pid)
	<-copied
	r.Close()
	if status != 0 {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("dhcp on eth0: no lease (udhcpc status %d: %s)", status, lines[len(lines)-1])
	}
	return nil
}
