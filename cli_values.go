package main

import (
	"fmt"
	"strconv"
	"strings"

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
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	shift := uint(20) // a plain number is MiB
	if t != "" {
		if i := strings.IndexByte("KMGT", t[len(t)-1]); i >= 0 {
			shift = uint(10 * (i + 1))
			t = t[:len(t)-1]
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

// netsValue collects repeated --net tap=NAME[,mac=MAC][,mtu=N][,io=uring|writev]
// [,pcap=FILE][,rx-rate=BYTES/s[:BURST]][,tx-rate=...][,rx-pps=N[:BURST]][,tx-pps=...]
// (or af_packet=IFNAME instead of tap=NAME: join a host interface).
type netsValue struct{ nets *[]vmm.NetConfig }

const netUsage = "tap=NAME[,mac=MAC][,mtu=N][,io=uring|writev][,pcap=FILE][,rx-rate=BYTES/s[:BURST]][,tx-rate=...][,rx-pps=N[:BURST]][,tx-pps=...]"

func (v netsValue) String() string { return "" }

func (v netsValue) Set(s string) error {
	var n vmm.NetConfig
	for _, kv := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(kv, "=")
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
			if mtu < virtionet.MinMTU || mtu > virtionet.MaxMTU {
				return fmt.Errorf("--net mtu=%d is outside %d..%d", mtu, virtionet.MinMTU, virtionet.MaxMTU)
			}
			n.MTU = mtu
		case "io":
			if val != virtionet.IOWritev && val != virtionet.IOUring {
				return fmt.Errorf("--net io=%q: use writev (one system call per frame) or uring", val)
			}
			n.IO = val
		case "pcap":
			n.Pcap = val
		case "rx-rate", "tx-rate", "rx-pps", "tx-pps":
			b, err := virtionet.ParseBucket(val)
			if err != nil {
				return fmt.Errorf("--net %s: %v", key, err)
			}
			l := map[string]*virtionet.Bucket{"rx-rate": &n.RxLimit.Bytes, "tx-rate": &n.TxLimit.Bytes,
				"rx-pps": &n.RxLimit.Frames, "tx-pps": &n.TxLimit.Frames}
			*l[key] = b
		default:
			return fmt.Errorf("--net: unknown key %q; expected %s", key, netUsage)
		}
	}
	if (n.Ifname == "") == (n.AFPacket == "") {
		return fmt.Errorf("--net %q: give one of tap=NAME or af_packet=IFNAME", s)
	}
	if n.AFPacket != "" && n.IO == virtionet.IOUring {
		return fmt.Errorf("--net %q: io=uring is for a tap; af_packet batches with sendmmsg already", s)
	}
	if n.Ifname != "" && n.IO == "" {
		// A batch of frames per system call: 2-3x the frames/s of one
		// writev per frame (virtionet/README.md); the device falls back to
		// writev, with a notice, where io_uring is unavailable.
		n.IO = virtionet.IOUring
	}
	*v.nets = append(*v.nets, n)
	return nil
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
