package devices

import (
	"testing"
)

func TestExitDeviceStatus(t *testing.T) {
	for _, c := range []struct {
		data []byte
		want int
	}{
		{[]byte{7}, 7},
		{[]byte{0x01, 0x01}, 1},                // 0x101 & 0xff
		{[]byte{0xff, 0xff, 0xff, 0xff}, 0xff}, // -1
		{[]byte{0, 1, 0, 0}, 0},
	} {
		var got []int
		d := NewExitDevice(func(status int) { got = append(got, status) })
		d.Write(0, c.data)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("write %x: exits %v, want status %d", c.data, got, c.want)
		}
	}
}

func TestExitDeviceIgnoresBadWrites(t *testing.T) {
	n := 0
	d := NewExitDevice(func(int) { n++ })
	d.Write(0, nil)
	d.Write(0, make([]byte, 8))
	d.Write(1, []byte{3})
	b := []byte{9, 9}
	d.Read(0, b)
	if n != 0 || b[0] != 0 || b[1] != 0 {
		t.Fatalf("%d stops, read %x", n, b)
	}
}

func TestI8042ResetAndStatus(t *testing.T) {
	resets := 0
	d := NewI8042(func() { resets++ })
	st := []byte{0xff}
	d.Read(0, st)
	if st[0]&0x02 != 0 {
		t.Fatal("status says input buffer full: Linux's kb_wait would spin")
	}
	d.Write(0, []byte{0x60})
	if resets != 0 {
		t.Fatal("a non-reset command stopped the guest")
	}
	d.Write(0, []byte{0xfe})
	if resets != 1 {
		t.Fatalf("%d resets", resets)
	}
}
