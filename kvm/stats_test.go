package kvm

import (
	"bytes"
	"encoding/binary"
	"maps"
	"testing"
)

// statsFile builds a stats file the way KVM lays it out: header, id,
// descriptors, data.
func statsFile(nameSize int, descs []struct {
	flags uint32
	size  uint16
	name  string
	vals  []uint64
}) []byte {
	le := binary.LittleEndian
	descSize := statsDescFixed + nameSize
	idOff := statsHeaderSize
	descOff := idOff + nameSize
	dataOff := descOff + len(descs)*descSize
	var data []byte
	var desc []byte
	for _, d := range descs {
		e := make([]byte, descSize)
		le.PutUint32(e[0:], d.flags)
		le.PutUint16(e[6:], d.size)
		le.PutUint32(e[8:], uint32(len(data)))
		copy(e[statsDescFixed:], d.name)
		desc = append(desc, e...)
		for _, v := range d.vals {
			data = le.AppendUint64(data, v)
		}
	}
	h := make([]byte, statsHeaderSize)
	le.PutUint32(h[4:], uint32(nameSize))
	le.PutUint32(h[8:], uint32(len(descs)))
	le.PutUint32(h[12:], uint32(idOff))
	le.PutUint32(h[16:], uint32(descOff))
	le.PutUint32(h[20:], uint32(dataOff))
	out := append(h, make([]byte, nameSize)...)
	out = append(out, desc...)
	return append(out, data...)
}

func TestParseStats(t *testing.T) {
	f := statsFile(48, []struct {
		flags uint32
		size  uint16
		name  string
		vals  []uint64
	}{
		{0, 1, "exits", []uint64{1234}},
		{4, 32, "halt_poll_success_hist", make([]uint64, 32)}, // a log histogram: skipped
		{1, 1, "io_exits", []uint64{77}},
		{2, 1, "max_mmu_page_hash_collisions", []uint64{3}},
	})
	got, err := ParseStats(bytes.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]uint64{"exits": 1234, "io_exits": 77, "max_mmu_page_hash_collisions": 3}; !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseStatsRejectsBadFiles(t *testing.T) {
	good := statsFile(16, []struct {
		flags uint32
		size  uint16
		name  string
		vals  []uint64
	}{{0, 1, "exits", []uint64{1}}})
	for name, f := range map[string][]byte{
		"empty":          nil,
		"short header":   good[:10],
		"no data":        good[:len(good)-8],
		"huge name size": func() []byte { b := bytes.Clone(good); binary.LittleEndian.PutUint32(b[4:], 1<<20); return b }(),
		"huge count":     func() []byte { b := bytes.Clone(good); binary.LittleEndian.PutUint32(b[8:], 1<<30); return b }(),
	} {
		if _, err := ParseStats(bytes.NewReader(f)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
