package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"--n", "3"}, ""},
		{[]string{"--bogus"}, "unknown flag --bogus; see tinyvmm bench x --help"},
		{[]string{"--n"}, "--n needs a value; see tinyvmm bench x --help"},
		{[]string{"--n", "many"}, `--n "many": not a number; see tinyvmm bench x --help`},
		{[]string{"--n", `a" for flag -m: "b`}, `--n "a\" for flag -m: \"b": not a number; see tinyvmm bench x --help`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int("n", 1, "a number")
		err := Parse(fs, "bench x", tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !IsUsage(err)):
			t.Errorf("%v: %v, want the usage error %q", tc.args, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	if err := Parse(fs, "x", []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	if !IsUsage(fmt.Errorf("wrapped: %w", Usagef("bad"))) || IsUsage(errors.New("runtime")) {
		t.Error("IsUsage does not tell usage errors from others")
	}
}

func TestParseFlagsOnly(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int("runs", 3, "how many runs")
		return fs
	}
	var out strings.Builder
	help, err := ParseFlagsOnly(newFS(), "bench x", "Usage: tinyvmm bench x [flags]", []string{"--help"}, &out)
	if !help || err != nil || !strings.HasPrefix(out.String(), "Usage: tinyvmm bench x [flags]\n") || !strings.Contains(out.String(), "-runs") {
		t.Errorf("--help: help=%v err=%v output %q", help, err, out.String())
	}
	out.Reset()
	help, err = ParseFlagsOnly(newFS(), "bench x", "usage", []string{"--runs", "2", "extra"}, &out)
	if want := `bench x: unexpected argument "extra"; see tinyvmm bench x --help`; help || !IsUsage(err) || err.Error() != want {
		t.Errorf("extra argument: help=%v err=%v, want the usage error %q", help, err, want)
	}
	help, err = ParseFlagsOnly(newFS(), "bench x", "usage", []string{"--bogus"}, &out)
	if help || !IsUsage(err) || out.Len() != 0 {
		t.Errorf("bad flag: help=%v err=%v output %q, want a usage error and no output", help, err, out.String())
	}
	if help, err = ParseFlagsOnly(newFS(), "bench x", "usage", []string{"--runs", "2"}, &out); help || err != nil {
		t.Errorf("good flags: help=%v err=%v", help, err)
	}
}

func TestNearest(t *testing.T) {
	flags := []string{"kernel", "initrd", "append", "mem", "cpus", "net", "share", "timeout", "trace", "tx-weight-pkts", "rx-weight-pkts"}
	for _, tc := range []struct{ typed, want string }{
		{"m", "mem"},         // QEMU's -m: the only flag it begins
		{"kernal", "kernel"}, // a typo
		{"netdev", "net"},    // QEMU's spelling begins with ours
		{"tx-weight", "tx-weight-pkts"},
		{"cpu", "cpus"},
		{"t", ""},           // timeout and trace both begin with t
		{"weight-pkts", ""}, // tx- and rx- are equally near
		{"zzzzzz", ""},
	} {
		if got := Nearest(tc.typed, flags); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.typed, got, tc.want)
		}
	}
}
