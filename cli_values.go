package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"tinyvmm/internal/cliflag"
	"tinyvmm/ratelimit"
	"tinyvmm/userproc"
	"tinyvmm/virtionet"
	"tinyvmm/vmm"
)

// sizeValue is a byte count given as 256M, 1G, 512K or 1T (powers of
// two); a plain number is MiB, as in QEMU's -m.
type sizeValue struct{ bytes *uint64 }

func (v sizeValue) String() string {
	if v.bytes == nil {
		return ""
	}
	return formatSize(*v.bytes)
}

func (v sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.bytes = n
	return nil
}

func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	binary := strings.HasSuffix(t, "IB") // 512MiB: the unit says powers of two
	t = strings.TrimSuffix(t, "IB")
	shift := uint(20) // a plain number is MiB
	if !binary && len(t) > 2 && strings.HasSuffix(t, "B") && strings.IndexByte("KMGT", t[len(t)-2]) >= 0 {
		// 512MB could mean 10^6 or 2^20 bytes: say which one tinyvmm takes.
		num := strings.TrimSpace(s)
		return 0, fmt.Errorf("--mem %q: sizes are powers of two; did you mean %s (%siB)?", s, num[:len(num)-1], num[:len(num)-1])
	}
	if t != "" {
		if i := strings.IndexByte("KMGT", t[len(t)-1]); i >= 0 {
			shift = uint(10 * (i + 1))
			t = t[:len(t)-1]
		} else if binary {
			t = "" // "512iB": no unit before iB
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n > (1<<62)>>shift {
		return 0, fmt.Errorf("--mem %q is not a size: give a number with an optional K, M, G or T suffix (like 256M)", s)
	}
	return n << shift, nil
}

func formatSize(n uint64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// netsValue collects repeated --net tap=NAME[,mac=MAC][,mtu=N][,io=uring|writev][,queues=N]
// [,pcap=FILE][,rx-rate=BYTES/s[:BURST]][,tx-rate=...][,rx-pps=N[:BURST]][,tx-pps=...]
// (or af_packet=IFNAME instead of tap=NAME: join a host interface; or user
// [,hostfwd=tcp:HOSTADDR:HPORT-:GPORT]...[,restrict=on]: a user-mode
// network, no root).
type netsValue struct{ nets *[]vmm.NetConfig }

const netUsage = "tap=NAME[,mac=MAC][,mtu=N][,io=uring|writev][,queues=N][,pcap=FILE][,rx-rate=BYTES/s[:BURST]][,tx-rate=...][,rx-pps=N[:BURST]][,tx-pps=...], af_packet=IFNAME[,...] or user[,hostfwd=tcp:127.0.0.1:HPORT-:GPORT]...[,restrict=on][,...]"

func (v netsValue) String() string { return "" }

func (v netsValue) Set(s string) error {
	var n vmm.NetConfig
	for i, kv := range strings.Split(s, ",") {
		if i == 0 && kv == "user" {
			n.User = &userproc.Config{}
			continue
		}
		key, val, ok := strings.Cut(kv, "=")
		if i == 0 && !ok && kv != "" {
			if cliflag.Nearest(kv, []string{"user"}) == "user" {
				return fmt.Errorf("--net %q: did you mean --net user?", s)
			}
			// A bare name is how a tap is named elsewhere (ip, QEMU's ifname=).
			return fmt.Errorf("--net %q: did you mean --net tap=%s? (af_packet=%s joins a host interface; user needs no root)", s, s, kv)
		}
		if !ok || val == "" {
			return fmt.Errorf("--net %q: expected %s", s, netUsage)
		}
		switch key {
		case "tap":
			n.Ifname = val
		case "af_packet":
			n.AFPacket = val
		case "mac":
			mac, err := virtionet.ParseMAC(val)
			if err != nil {
				return fmt.Errorf("--net %s", err)
			}
			n.MAC = mac
		case "mtu":
			mtu, err := strconv.Atoi(val)
			if err != nil || mtu <= 0 {
				return fmt.Errorf("--net mtu=%q is not a positive number", val)
			}
			n.MTU = mtu
		case "io":
			io, err := virtionet.ParseIO(val)
			if err != nil {
				return fmt.Errorf("--net io=%q: use writev (one system call per frame) or uring", val)
			}
			n.IO = io
		case "queues":
			q, err := strconv.Atoi(val)
			if err != nil || q < 1 || q > virtionet.MaxQueuePairs {
				return fmt.Errorf("--net queues=%q is not a number of queue pairs in 1..%d", val, virtionet.MaxQueuePairs)
			}
			n.Queues = q
		case "pcap":
			n.Pcap = val
		case "hostfwd":
			if n.User == nil {
				return fmt.Errorf("--net %q: hostfwd= is for a user network: --net user,hostfwd=...", s)
			}
			f, err := parseHostFwd(val)
			if err != nil {
				return err
			}
			n.User.Forwards = append(n.User.Forwards, f)
		case "restrict":
			if n.User == nil {
				return fmt.Errorf("--net %q: restrict= is for a user network: --net user,restrict=on", s)
			}
			switch val {
			case "on", "yes":
				n.User.Restrict = true
			case "off", "no":
				n.User.Restrict = false
			default:
				return fmt.Errorf("--net restrict=%q: use on (the guest reaches only DHCP, DNS and its hostfwd ports) or off", val)
			}
		case "rx-rate", "tx-rate", "rx-pps", "tx-pps":
			b, err := ratelimit.ParseBucket(val)
			if err != nil {
				return fmt.Errorf("--net %s: %v", key, err)
			}
			l := map[string]*ratelimit.Bucket{"rx-rate": &n.RxLimit.Bytes, "tx-rate": &n.TxLimit.Bytes,
				"rx-pps": &n.RxLimit.Frames, "tx-pps": &n.TxLimit.Frames}
			*l[key] = b
		default:
			return fmt.Errorf("--net: unknown key %q; expected %s", key, netUsage)
		}
	}
	switch {
	case n.User != nil && n.Ifname != "":
		return fmt.Errorf("--net %q: a user network takes no tap=, af_packet= or io=", s)
	case n.User != nil:
		users := 0
		for _, o := range *v.nets {
			if o.User != nil {
				users++
			}
		}
		n.Ifname = fmt.Sprintf("user%d", users) // names it in messages and stats, and seeds its MAC
		n.Config.User = true
	case (n.Ifname == "") == (n.AFPacket == ""):
		return fmt.Errorf("--net %q: give one of tap=NAME, af_packet=IFNAME or user", s)
	}
	// The device's rules (virtionet.Config.Normalized) that concern one
	// key of this argument, said in --net's words; the rest are reported
	// with the whole configuration, and the defaults are filled in when
	// the VMM opens the NIC.
	var ce *virtionet.ConfigError
	if err := n.Config.Validate(); errors.As(err, &ce) {
		if ce.QuoteArg {
			return fmt.Errorf("--net %q: %s", s, ce.Flag)
		}
		return fmt.Errorf("--net %s", ce.Flag)
	}
	*v.nets = append(*v.nets, n)
	return nil
}

// parseHostFwd parses QEMU's hostfwd syntax, TCP only:
// tcp:[HOSTADDR]:HPORT-[GUESTADDR]:GPORT. HOSTADDR defaults to 127.0.0.1
// (QEMU's is every address: a forward open to the network must be asked
// for); GUESTADDR, if given, must be the guest's own, userproc.GuestIP.
func parseHostFwd(val string) (userproc.Forward, error) {
	bad := func(why string) (userproc.Forward, error) {
		return userproc.Forward{}, fmt.Errorf("--net hostfwd=%s: %s; expected tcp:127.0.0.1:HPORT-:GPORT", val, why)
	}
	rest, ok := strings.CutPrefix(val, "tcp:")
	if !ok {
		return bad("only tcp forwards are supported")
	}
	hostPart, guestPart, ok := strings.Cut(rest, "-")
	if !ok {
		return bad("no '-' between the host and the guest side")
	}
	haddr, hport, err := net.SplitHostPort(hostPart)
	if err != nil {
		return bad("host side is not ADDR:PORT")
	}
	if haddr == "" {
		haddr = "127.0.0.1"
	}
	if ip := net.ParseIP(haddr); ip == nil || ip.To4() == nil {
		return bad("host address " + haddr + " is not an IPv4 address")
	}
	if _, err := strconv.ParseUint(hport, 10, 16); err != nil {
		return bad("host port " + hport + " is not a port number")
	}
	gaddr, gport, err := net.SplitHostPort(guestPart)
	if err != nil {
		return bad("guest side is not [ADDR]:PORT")
	}
	if gaddr != "" && gaddr != userproc.GuestIP {
		return bad("the guest's address is " + userproc.GuestIP)
	}
	gp, err := strconv.ParseUint(gport, 10, 16)
	if err != nil || gp == 0 {
		return bad("guest port " + gport + " is not a port number from 1 to 65535")
	}
	return userproc.Forward{Host: net.JoinHostPort(haddr, hport), GuestPort: uint16(gp)}, nil
}

// statsValue is --stats (text on stderr) or --stats=FILE (JSON).
type statsValue struct{ target *string }

func (v statsValue) String() string {
	if v.target == nil {
		return ""
	}
	return *v.target
}

func (v statsValue) Set(s string) error {
	switch s {
	case "true":
		*v.target = "-"
	case "false", "":
		*v.target = ""
	default:
		*v.target = s
	}
	return nil
}

// IsBoolFlag lets --stats stand alone.
func (v statsValue) IsBoolFlag() bool { return true }

// OptionalValue names the value --stats may take, for --help.
func (v statsValue) OptionalValue() string { return "FILE" }
