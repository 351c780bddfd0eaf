package e2e

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// ringBlock lays frames out as the kernel does in a TPACKET_V3 block:
// each behind a tpacket3_hdr and its sockaddr_ll, at 16-byte alignment.
func ringBlock(frames [][]byte, pkttypes []uint8) []byte {
	le := binary.LittleEndian
	block := make([]byte, 4096)
	const first, mac = 48, 82
	le.PutUint32(block[blockNumPktsOff:], uint32(len(frames)))
	le.PutUint32(block[blockFirstOff:], first)
	off := first
	for i, f := range frames {
		h := block[off:]
		next := (mac + len(f) + 15) &^ 15
		if i+1 < len(frames) {
			le.PutUint32(h[pktNextOff:], uint32(next))
		}
		le.PutUint32(h[pktSnaplenOff:], uint32(len(f)))
		le.PutUint16(h[pktMacOff:], mac)
		h[pktTypeOff] = pkttypes[i]
		copy(h[mac:], f)
		off += next
	}
	return block
}

func TestBlockFramesSkipsWhatTheHostSent(t *testing.T) {
	a, b, c := bytes.Repeat([]byte{1}, 64), bytes.Repeat([]byte{2}, 1400), bytes.Repeat([]byte{3}, 60)
	block := ringBlock([][]byte{a, b, c}, []uint8{unix.PACKET_HOST, unix.PACKET_OUTGOING, unix.PACKET_OTHERHOST})
	got, err := blockFrames(block, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], c) {
		t.Fatalf("got %d frames %v; want the first and the third", len(got), got)
	}
}

func TestBlockFramesRefusesFramesPastTheBlock(t *testing.T) {
	le := binary.LittleEndian
	for name, spoil := range map[string]func([]byte){
		"first frame past the end": func(b []byte) { le.PutUint32(b[blockFirstOff:], uint32(len(b)-8)) },
		"snaplen past the end":     func(b []byte) { le.PutUint32(b[48+pktSnaplenOff:], 1<<20) },
		"more frames than there are": func(b []byte) {
			le.PutUint32(b[blockNumPktsOff:], 3)
		},
	} {
		block := ringBlock([][]byte{make([]byte, 64), make([]byte, 64)}, []uint8{unix.PACKET_HOST, unix.PACKET_HOST})
		spoil(block)
		if _, err := blockFrames(block, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
