// Package userproc is the VMM's side of --net user: the user-mode network
// runs in a process of its own, tinyvmm-usernet (cmd/tinyvmm-usernet, on
// package usernetd and gvisor-tap-vsock), as passt and slirp4netns run
// beside QEMU. This package starts it, hands it one end of a
// SOCK_SEQPACKET socketpair and keeps the other as the device's backend.
//
// Why a process: the stack and its dependencies (~10 MB of binary, a
// hundred package inits) would be paid by every tinyvmm, and a hostile
// frame that panics the stack then takes down only that process.
// This package imports none of it; both sides share the layout, the
// command line and the link's one control message defined here.
package userproc

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The guest's network, laid out as QEMU's user networking lays it out, so
// what people know from -nic user holds: the gateway is also the host's
// loopback and the DNS server.
const (
	Subnet = "10.0.2.0/24"
	// GatewayIP answers DHCP and DNS; other TCP and UDP to it reaches the
	// host's 127.0.0.1 on the same port.
	GatewayIP = "10.0.2.2"
	// GuestIP is the address DHCP gives the guest's MAC.
	GuestIP = "10.0.2.15"
	// HostName is what the gateway's DNS server answers with GatewayIP
	// itself; other names go to the host's resolvers.
	HostName = "host." + DNSZone
	DNSZone  = "tinyvmm.internal"
)

// Config is one user-mode network.
type Config struct {
	// MAC is the guest's MAC: DHCP hands GuestIP to it.
	MAC net.HardwareAddr
	// MTU of the link (the device's); DHCP tells the guest. 0 is 1500.
	MTU int
	// Forwards are TCP listeners on the host whose connections go to a
	// port of the guest (hostfwd=).
	Forwards []Forward
	// Restrict (restrict=on, as in QEMU) keeps the guest from reaching
	// the host or anything beyond it: it gets DHCP and DNS from the
	// gateway and answers connections that come in through Forwards,
	// nothing else.
	Restrict bool
}

// Forward is one hostfwd=tcp:HOSTADDR:HPORT-:GPORT.
type Forward struct {
	// Host is the address to listen on, "127.0.0.1:8080"; port 0 picks a
	// free one (the ready line tells which).
	Host      string
	GuestPort uint16
}

// The child's inherited descriptors (exec.Cmd.ExtraFiles 0 and 1).
const (
	// LinkFd is the gateway's end of the socketpair.
	LinkFd = 3
	// ReadyFd is a pipe: one line, "ready ADDR..." (each hostfwd's
	// listening address, in order) or "error MESSAGE", then closed.
	ReadyFd = 4
)

// Offloads are the TUNSETOFFLOAD flags the user network takes from the
// device: checksum offload and TSO over IPv4 (the stack has no IPv6). The
// guest then hands over TCP super-frames of up to 64 KiB with their
// checksums left partial, where it would cut 45 frames of 1.5 KiB and sum
// each: the link carries, and the stack handles, one frame for those 45.
// The stack takes them as they are: its link endpoint declares receive
// checksums verified, so it neither checks the partial sum nor minds a
// segment longer than the MSS it announced. Towards a guest that takes
// them (OffloadMsg), the stack's TCP goes out the same way: super-frames
// of up to 64 KiB, their checksums partial, behind a vnet header that says
// so, as a tap with TSO hands them over.
const Offloads = 0x01 | 0x02 // TUN_F_CSUM | TUN_F_TSO4

// SetSendBuffer asks for a send buffer of want bytes on the socket fd:
// past net.core.wmem_max if the process may (CAP_NET_ADMIN, as root),
// else up to it. It returns what the socket got. The device drops a
// frame the socket has no room for, as a full tap queue does, so the
// room is what a burst of the guest's frames can fill before a loss.
func SetSendBuffer(fd, want int) int {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, want) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, want) // best effort
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if err != nil {
		return 0
	}
	return got / 2 // Linux reports twice what it accounts frames against
}

// ProfileEnv, in tinyvmm-usernet's environment (tinyvmm passes its own
// on), makes it write its CPU profile to files named after the value:
// PREFIX.1, PREFIX.2, ..., one per ProfileSegment, or from its first
// SIGUSR1 on one per SIGUSR1 (bench usernet sends one at each cell), and
// a line of its GC counters at each file's start to PREFIX.gc. It is
// killed at the end, so a profile written only at exit would never be.
const ProfileEnv = "TINYVMM_USERNET_CPUPROFILE"

// NoGSOEnv, set in tinyvmm-usernet's environment, keeps it from sending
// a guest that takes TSO (OffloadMsg) TCP super-frames of up to 64 KiB
// with partial checksums, and has it send 1.5 KiB frames, each with its
// checksum done: the benchmark's way to compare the two.
const NoGSOEnv = "TINYVMM_USERNET_NO_GSO"

// TxSingleEnv, set in tinyvmm-usernet's environment, makes it send each
// frame to the guest with a system call of its own instead of batching
// them: the benchmark's way to compare the two.
const TxSingleEnv = "TINYVMM_USERNET_TX_SINGLE"

// ProfileSegment is how much of tinyvmm-usernet's run one profile file covers.
const ProfileSegment = 2 * time.Second

// HdrSizeMsg opens one of the link's two control messages, 2 bytes from the
// device's end: HdrSizeMsg, then the vnet header size that the frames
// after it carry. Every frame from the device is longer (its header alone
// is 10 or 12 bytes), so the two cannot be confused; the socket keeps
// their order.
const HdrSizeMsg = 0xf0

// OffloadMsg is the link's other control message, 2 bytes from the
// device's end: OffloadMsg, then the TUNSETOFFLOAD flags the guest takes
// (checksum 0x01, TSO over IPv4 0x02): which frames the child may send it.
const OffloadMsg = 0xf1

// Args is the child's command line for c (after the program name).
func (c Config) Args() []string {
	args := []string{"-mac", c.MAC.String(), "-mtu", strconv.Itoa(c.MTU)}
	for _, f := range c.Forwards {
		args = append(args, "-fwd", f.Host+"="+strconv.Itoa(int(f.GuestPort)))
	}
	if c.Restrict {
		args = append(args, "-restrict")
	}
	return args
}

// ParseArgs reads what Args wrote.
func ParseArgs(args []string) (Config, error) {
	var c Config
	var mac string
	fs := flag.NewFlagSet("tinyvmm-usernet", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&mac, "mac", "", "the guest's `MAC`")
	fs.IntVar(&c.MTU, "mtu", 1500, "the link's `MTU`")
	fs.BoolVar(&c.Restrict, "restrict", false, "the guest reaches only DHCP, DNS and its hostfwd ports")
	fs.Func("fwd", "a hostfwd, `HOSTADDR:PORT=GUESTPORT` (repeatable)", func(s string) error {
		host, gport, ok := strings.Cut(s, "=")
		p, err := strconv.ParseUint(gport, 10, 16)
		if !ok || err != nil || p == 0 {
			return fmt.Errorf("want HOSTADDR:PORT=GUESTPORT")
		}
		c.Forwards = append(c.Forwards, Forward{Host: host, GuestPort: uint16(p)})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() != 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.MAC, err = net.ParseMAC(mac); err != nil || len(c.MAC) != 6 {
		return c, fmt.Errorf("-mac %q is not a MAC", mac)
	}
	return c, nil
}

// ReadyLine is the line the child writes once its listeners are open.
func ReadyLine(addrs []string) string {
	return strings.Join(append([]string{"ready"}, addrs...), " ") + "\n"
}

// ErrorLine is the line the child writes when it cannot start.
func ErrorLine(err error) string {
	return "error " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
}

// parseReady reads the child's line: the forwards' addresses, or its error.
func parseReady(line string) ([]string, error) {
	line = strings.TrimSuffix(line, "\n")
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return nil, errors.New(msg)
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "ready" {
		return nil, fmt.Errorf("%s exited before it was ready", Program)
	}
	return f[1:], nil
}
