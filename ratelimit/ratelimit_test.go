package ratelimit

import (
	"strings"
	"testing"
	"time"
)

func TestParseBucket(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bucket
		err  string
	}{
		{"1000", Bucket{Rate: 1000}, ""},
		{"10M/s", Bucket{Rate: 10_000_000}, ""},
		{"10M/s:64Ki", Bucket{Rate: 10_000_000, Burst: 64 << 10}, ""},
		{"2Gi:1k", Bucket{Rate: 2 << 30, Burst: 1000}, ""},
		{"5000:10", Bucket{Rate: 5000, Burst: 10}, ""},
		{"0", Bucket{}, "not a positive number"},
		{"", Bucket{}, "not a positive number"},
		{"-5", Bucket{}, "not a positive number"},
		{"10X", Bucket{}, "not a positive number"},
		{"10M/s:", Bucket{}, "burst"},
		{"10M/s:0", Bucket{}, "burst"},
		{"99999999999G", Bucket{}, "not a positive number"},
	} {
		got, err := ParseBucket(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("ParseBucket(%q) = %+v, %v; want one line with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBucket(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// The bucket refills at its rate up to its size, goes into debt for a
// frame that is larger than what is left, and says how long to wait.
func TestBucketArithmetic(t *testing.T) {
	t0 := time.Now()
	l := New(Limit{Bytes: Bucket{Rate: 1000, Burst: 500}, Frames: Bucket{Rate: 10, Burst: 2}}, t0)
	f, b, _ := l.Room(t0)
	if f != 2 || b != 500 {
		t.Fatalf("a new Limiter has room %d frames, %d bytes; want a full bucket (2, 500)", f, b)
	}
	l.Charge(400)
	l.Charge(400) // 100 bytes were left: 300 bytes of debt
	f, b, wait := l.Room(t0)
	if f != 0 || b != 0 {
		t.Fatalf("room %d frames, %d bytes after using both; want none", f, b)
	}
	// Bytes: 300 of debt, then 1 ms worth (1 byte) -> 301 ms; frames: 1 -> 100 ms.
	if wait < 300*time.Millisecond || wait > 302*time.Millisecond {
		t.Errorf("wait %v, want ~301ms (the byte debt)", wait)
	}
	f, b, _ = l.Room(t0.Add(400 * time.Millisecond))
	if f != 2 || b != 100 {
		t.Errorf("after 400 ms: room %d frames, %d bytes; want 2 (full) and 100", f, b)
	}
	f, b, _ = l.Room(t0.Add(10 * time.Second))
	if f != 2 || b != 500 {
		t.Errorf("after 10 s: room %d frames, %d bytes; want the sizes 2 and 500", f, b)
	}
	// A default burst is a tenth of a second, and at least one token.
	if nb := newBucket(Bucket{Rate: 5}, t0); nb.size != 1 {
		t.Errorf("default size at 5/s: %v, want 1", nb.size)
	}
	if nb := newBucket(Bucket{Rate: 1e6}, t0); nb.size != 1e5 {
		t.Errorf("default size at 1e6/s: %v, want 1e5", nb.size)
	}
	if New(Limit{}, t0) != nil {
		t.Error("a zero Limit made a Limiter")
	}
}
