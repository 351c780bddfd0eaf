package e2e

import (
	"errors"
	"testing"
)

// The hashes of whole frames built by guest/bench/frame.c (compiled for the
// host): the Go builder must produce the very same bytes.
var guestFrames = []struct {
	size int
	seq  uint64
	hash uint32
}{
	{60, 0x0, 0xa8ce9c12}, {60, 0x1, 0x90a7b4a1}, {60, 0x123456789a, 0xc6c7ab08},
	{64, 0x0, 0x1c91eaf1}, {64, 0x1, 0xea31e2c2}, {64, 0x123456789a, 0xa2e77394},
	{1400, 0x0, 0xa488d76d}, {1400, 0x1, 0xf125a6a6}, {1400, 0x123456789a, 0x2ce81d68},
	{1514, 0x0, 0x4acc78ba}, {1514, 0x1, 0x6c40b235}, {1514, 0x123456789a, 0x1feabcb0},
	{61, 0x0, 0xeeb9f146}, {61, 0x1, 0x324b6f31}, {61, 0x123456789a, 0x56bb9329},
	{63, 0x0, 0x1727a1dc}, {63, 0x1, 0xb910cd94}, {63, 0x123456789a, 0xa122c0a7},
}

var guestMAC = []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}

func TestFramesMatchTheGuest(t *testing.T) {
	for _, g := range guestFrames {
		f := make([]byte, g.size)
		BuildFrame(f, g.seq, guestMAC, SinkMAC, GuestIP, HostIP)
		var h uint32
		for _, b := range f {
			h = h*31 + uint32(b)
		}
		if h != g.hash {
			t.Errorf("size %d seq %#x: hash %#08x, the guest builds %#08x", g.size, g.seq, h, g.hash)
		}
		seq, err := CheckFrame(f)
		if err != nil || seq != g.seq {
			t.Errorf("size %d seq %#x: CheckFrame = %#x, %v", g.size, g.seq, seq, err)
		}
	}
}

func TestCheckFrameCatchesCorruption(t *testing.T) {
	f := make([]byte, 200)
	BuildFrame(f, 7, guestMAC, SinkMAC, GuestIP, HostIP)
	for _, i := range []int{frameHeader + 4, frameHeader + 20, len(f) - 1} {
		g := append([]byte(nil), f...)
		g[i] ^= 0x10
		if _, err := CheckFrame(g); !errors.Is(err, errCorrupt) {
			t.Errorf("flipping byte %d: err = %v, want corrupt", i, err)
		}
	}
	if _, err := CheckFrame(f[:frameHeader+20]); !errors.Is(err, errCorrupt) {
		t.Errorf("truncated frame: err = %v, want corrupt", err)
	}
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	if _, err := CheckFrame(arp); !errors.Is(err, errNotBench) {
		t.Errorf("ARP frame: err = %v, want not-bench", err)
	}
}

func TestSeqCounter(t *testing.T) {
	var c seqCounter
	f := make([]byte, 64)
	for _, seq := range []uint64{0, 1, 4, 3, 5} {
		BuildFrame(f, seq, guestMAC, SinkMAC, GuestIP, HostIP)
		c.add(f)
	}
	f[len(f)-1] ^= 1
	c.add(f)
	if c.Good != 5 || c.Lost != 2 || c.Reordered != 1 || c.Bad != 1 {
		t.Errorf("counts %+v, want 5 good, 2 lost, 1 reordered, 1 bad", c)
	}
}
