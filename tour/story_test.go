package tour

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tinyvmm/internal/godecl"
	"tinyvmm/virtionet"
)

// A trace as tinyvmm --trace prints it for one ping with both ARP entries
// set: the rx kicks of boot, then the echo request and its reply.
const pingTrace = `+0.912000 rx kick
kvm: MSRs this KVM refused: [0xc0010007]
+3.100000 tx kick
+3.100012 tx pop head=0 bufs=1
+3.100030 tx writev 1
+3.100041 tx used published
+3.100043 tx irq
+3.100410 rx batch 1
+3.100415 rx used published
+3.100420 rx irq
`

func pingStats() virtionet.Stats {
	return virtionet.Stats{Ifname: "tvtour0", IO: "uring", Queues: []virtionet.QueueStats{
		{Queue: "rx", Frames: 1, Bytes: 98, Kicks: 1, Interrupts: 1},
		{Queue: "tx", Frames: 1, Bytes: 98, Kicks: 1, Interrupts: 1},
	}}
}

func TestParseTrace(t *testing.T) {
	evs, err := ParseTrace(strings.NewReader(pingTrace))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 9 {
		t.Fatalf("%d events, want 9 (the notice is not one): %+v", len(evs), evs)
	}
	if e := evs[2]; e.Queue != "tx" || e.What != "pop" || e.Args != "head=0 bufs=1" || e.At != 3*time.Second+100012*time.Microsecond {
		t.Errorf("pop parsed as %+v", e)
	}
	if e := evs[4]; e.What != "used published" || e.Args != "" {
		t.Errorf("publish parsed as %+v", e)
	}
}

func TestTellPing(t *testing.T) {
	evs, _ := ParseTrace(strings.NewReader(pingTrace))
	s, err := Tell(evs, pingStats())
	if err != nil {
		t.Fatal(err)
	}
	if s.RoundTrip != 420*time.Microsecond {
		t.Errorf("round trip %v, want 420us (kick to rx irq)", s.RoundTrip)
	}
	var took []string
	for _, st := range append(append([]Step{}, s.Out...), s.In...) {
		if st.Traced {
			took = append(took, st.Took.String())
		}
		if st.Where == "" {
			t.Errorf("step %q names no place", st.Text)
		}
	}
	// kick, pop, tap write, publish, tx irq; rx batch, publish, rx irq
	if got := strings.Join(took, " "); got != "0s 12µs 18µs 11µs 2µs 367µs 5µs 5µs" {
		t.Errorf("step times %s", got)
	}
	if len(s.Notes) != 0 {
		t.Errorf("notes %q", s.Notes)
	}
	var b strings.Builder
	Render(&b, s)
	text := b.String()
	for _, want := range []string{"the writev returns", "virtionet/worker.go worker.onKick", "counter: tx frames 1, bytes 98",
		"counter: rx interrupts 1", "round trip take 420 us", "+367 us"} {
		if !strings.Contains(text, want) {
			t.Errorf("story lacks %q:\n%s", want, text)
		}
	}
	for i, l := range strings.Split(text, "\n") {
		if len(l) > Width {
			t.Errorf("line %d is %d columns: %q", i+1, len(l), l)
		}
	}
}

func TestTellWithoutKickOrInterrupts(t *testing.T) {
	trace := "+1.000000 tx pop head=4 bufs=2\n+1.000010 tx used published\n+1.000300 rx batch 2\n+1.000301 rx used published\n"
	evs, _ := ParseTrace(strings.NewReader(trace))
	st := pingStats()
	st.Queues[1].Frames = 3
	s, err := Tell(evs, st)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{"no tx kick", "no rx interrupt", "3 tx and 1 rx frames"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q: %s", want, notes)
		}
	}
	var b strings.Builder
	Render(&b, s)
	if !strings.Contains(b.String(), "writes the frame to the tap, adds the used entry") || !strings.Contains(b.String(), "no tx interrupt") {
		t.Errorf("story:\n%s", b.String())
	}
}

func TestTellNeedsBothFrames(t *testing.T) {
	for _, trace := range []string{"", "+1.000000 rx kick\n", "+1.000000 tx pop head=0 bufs=1\n+1.000001 tx used published\n"} {
		evs, _ := ParseTrace(strings.NewReader(trace))
		if _, err := Tell(evs, pingStats()); err == nil {
			t.Errorf("no error for trace %q", trace)
		}
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aa bb cc dd", 5)
	if strings.Join(got, "|") != "aa bb|cc dd" {
		t.Errorf("wrap: %q", got)
	}
}

// TestStoryNamesWhatExists checks every "file.go Func" the story names
// against the source tree, so the story follows renames in the datapath.
func TestStoryNamesWhatExists(t *testing.T) {
	root := ".."
	if _, err := os.Stat(filepath.Join(root, "virtionet", "worker.go")); err != nil {
		t.Skip("no sources here (the nested L1 carries only binaries)")
	}
	var steps []Step
	for _, trace := range []string{pingTrace, strings.ReplaceAll(pingTrace, "tx writev 1", "tx uring 2"),
		"+1.000000 tx pop head=4 bufs=2\n+1.000010 tx used published\n+1.000300 rx batch 2\n+1.000301 rx used published\n"} {
		evs, _ := ParseTrace(strings.NewReader(trace))
		s, err := Tell(evs, pingStats())
		if err != nil {
			t.Fatal(err)
		}
		steps = append(append(steps, s.Out...), s.In...)
	}
	// "dir/file.go A, B, other/file.go C": names follow their file.
	ref := regexp.MustCompile(`^[\w/]+\.go$`)
	checked := 0
	for _, st := range steps {
		if strings.HasPrefix(st.Where, "guest Linux") {
			continue
		}
		file := ""
		for _, word := range strings.Fields(strings.NewReplacer(",", " ", "registered by", "").Replace(st.Where)) {
			if ref.MatchString(word) {
				file = word
				continue
			}
			if file == "" {
				t.Errorf("%q: %s names no file first", st.Where, word)
				continue
			}
			names, err := godecl.Declared(filepath.Join(root, file))
			if err != nil {
				t.Errorf("%q: %v", st.Where, err)
				continue
			}
			if !names[word] {
				t.Errorf("%q: %s does not declare %s", st.Where, file, word)
			}
			checked++
		}
	}
	if checked < 15 {
		t.Errorf("only %d names checked", checked)
	}
}

// parseEvent takes exactly the trace's event lines.
func TestParseEventLines(t *testing.T) {
	for line, want := range map[string]*Event{
		"+12.345678 tx pop head=3 bufs=2":    {At: 12*time.Second + 345678*time.Microsecond, Queue: "tx", What: "pop", Args: "head=3 bufs=2"},
		"+0.000001 rx used published":        {At: time.Microsecond, Queue: "rx", What: "used published"},
		"+0.000001 rx used published n=4":    {At: time.Microsecond, Queue: "rx", What: "used published", Args: "n=4"},
		"+0.000001 rx used publishedX n=4":   {At: time.Microsecond, Queue: "rx", What: "used", Args: "publishedX n=4"},
		"+1.000000 tx kick":                  {At: time.Second, Queue: "tx", What: "kick"},
		"+1.000000 tx irq ":                  {At: time.Second, Queue: "tx", What: "irq"},
		"+1.00000 tx kick":                   nil, // 5 digits
		"+1.0000000 tx kick":                 nil,
		"1.000000 tx kick":                   nil,
		"+.000000 tx kick":                   nil,
		"+1.000000 ctl kick":                 nil,
		"+1.000000 tx Kick":                  nil,
		"+1.000000 tx kick2":                 nil,
		"+1.000000 tx ":                      nil,
		"tinyvmm: host KVM is hardware virt": nil,
	} {
		ev, ok := parseEvent(line)
		switch {
		case want == nil && ok:
			t.Errorf("%q parsed as %+v, want no event", line, ev)
		case want != nil && (!ok || ev != *want):
			t.Errorf("%q: %+v %v, want %+v", line, ev, ok, *want)
		}
	}
}
