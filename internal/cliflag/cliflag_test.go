package cliflag

import (
	"errors"
	"flag"
	"fmt"
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
