package e2e

import (
	"net"
	"slices"
	"testing"
)

func TestParsePktgenCounts(t *testing.T) {
	file := "Params: count 50000000  min_pkt_size: 64  max_pkt_size: 64\n" +
		"     frags: 0  delay: 0  clone_skb: 0  ifname: tap0\n" +
		"Current:\n     pkts-sofar: 188704  errors: 36687\n" +
		"     started: 49012us  stopped: 51512us idle: 0us\n"
	sent, errs, err := parsePktgenCounts(file)
	if err != nil || sent != 188704 || errs != 36687 {
		t.Errorf("got %d sent, %d errors, %v; want 188704, 36687", sent, errs, err)
	}
	if _, _, err := parsePktgenCounts("Result: Idle\n"); err == nil {
		t.Error("a file without counts parsed")
	}
}

// The flood pktgen is told to send is the bench's: its addresses, ports
// and frame size, no skb reuse (a tap cannot share one), no timestamps.
func TestPktgenCommands(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	cmds := pktgenCommands(mac, 64, 1000)
	for _, want := range []string{"clone_skb 0", "count 1000", "pkt_size 64", "dst_mac 52:54:00:12:34:56",
		"dst 10.0.2.15", "src_min 10.0.2.1", "udp_src_min 40000", "udp_dst_max 9", "flag NO_TIMESTAMP"} {
		if !slices.Contains(cmds, want) {
			t.Errorf("no %q in %q", want, cmds)
		}
	}
}
