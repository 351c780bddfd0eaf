// Package cliflag is the flag handling tinyvmm's commands share (run and
// the benchmarks): a bad command line is one line in the form users type
// (--name VALUE) and exit status 2, never the flag package's usage dump.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"tinyvmm/internal/textwrap"
)

// UsageError is a bad command line. The CLI prints it as one line and
// exits with status 2, before anything is loaded or opened.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Sprintf(format, args...)}
}

// IsUsage reports whether err is (or wraps) a UsageError.
func IsUsage(err error) bool {
	var ue *UsageError
	return errors.As(err, &ue)
}

// Prog is the program the messages send the user to for help: tinyvmm,
// or the lab command, which sets it as it starts.
var Prog = "tinyvmm"

// Parse parses args into fs without printing anything. It returns
// flag.ErrHelp for -h/--help (the caller prints its own help) and a
// UsageError for anything else wrong, naming the command (like "bench
// device") and where to look for help.
func Parse(fs *flag.FlagSet, command string, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return Usagef("%s; see %s %s --help", explain(fs, err), Prog, command)
}

// explain is Message with what only the flag set knows: the flag that was
// probably meant, and the unit a duration needs.
func explain(fs *flag.FlagSet, err error) string {
	msg := Message(err)
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		if near := Nearest(strings.TrimLeft(name, "-"), flagNames(fs)); near != "" {
			return fmt.Sprintf("%s; did you mean --%s?", msg, near)
		}
		return msg
	}
	if value, name, _, ok := valueError(err.Error()); ok {
		if f := fs.Lookup(name); f != nil && isDuration(f.Value) {
			if v, uerr := strconv.Unquote(value); uerr == nil {
				if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
					return fmt.Sprintf("--%s %s: a duration needs a unit: %ss or %sm", name, v, v, v)
				}
			}
		}
	}
	return msg
}

func isDuration(v flag.Value) bool {
	g, ok := v.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(time.Duration)
	return ok
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// Nearest returns the one candidate the user most likely meant by typed,
// as git and cargo suggest: the only candidate that typed is a prefix of,
// else the only one that typed begins with (--netdev for --net), else the
// closest by edit distance if it is close enough to be a typo (at most 2
// edits, and fewer than the typed word's length). "" when none stands out.
func Nearest(typed string, candidates []string) string {
	var prefixed, stems []string
	for _, c := range candidates {
		if typed != "" && strings.HasPrefix(c, typed) {
			prefixed = append(prefixed, c)
		}
		if len(c) >= 3 && strings.HasPrefix(typed, c) {
			stems = append(stems, c) // --netdev for --net
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	if len(prefixed) == 0 && len(stems) == 1 {
		return stems[0]
	}
	best, bestDist, tie := "", 3, false
	for _, c := range candidates {
		d := editDistance(typed, c)
		if d >= len(typed) {
			continue // not a typo of it: most of the word would change
		}
		switch {
		case d < bestDist:
			best, bestDist, tie = c, d, false
		case d == bestDist:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// valueError splits the flag package's wrapper around a Set error,
// `invalid value "VALUE" for flag -NAME: REASON` (VALUE quoted by %q). Plain
// string code, not a regexp: a package-level regexp is compiled in every
// tinyvmm process as it starts, `run` included.
func valueError(msg string) (value, name, reason string, ok bool) {
	rest, ok := strings.CutPrefix(msg, "invalid value ")
	if !ok {
		return "", "", "", false
	}
	value, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", "", "", false
	}
	rest, ok = strings.CutPrefix(rest[len(value):], " for flag -")
	if !ok {
		return "", "", "", false
	}
	name, reason, ok = strings.Cut(rest, ": ")
	if !ok || name == "" || strings.ContainsAny(name, " \n") {
		return "", "", "", false
	}
	return value, name, reason, true
}

// Message rewords the flag package's errors in the form users type.
func Message(err error) string {
	msg := err.Error()
	if value, name, reason, ok := valueError(msg); ok {
		if strings.HasPrefix(reason, "--") {
			return reason // our own Set errors name the flag already
		}
		if reason == "parse error" || strings.Contains(reason, "invalid syntax") {
			reason = "not a number"
		}
		return fmt.Sprintf("--%s %s: %s", name, value, reason)
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "--" + name + " needs a value"
	}
	return msg
}

// ParseFlagsOnly is Parse for a command that takes flags and no arguments
// (the benchmarks). For -h/--help it prints usage, then the flags, to
// stdout and returns help = true; an argument left over is a UsageError.
func ParseFlagsOnly(fs *flag.FlagSet, command, usage string, args []string, stdout io.Writer) (help bool, err error) {
	if err := Parse(fs, command, args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, usage)
		PrintFlags(stdout, fs, nil)
		return true, nil
	} else if err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, Usagef("%s: unexpected argument %q; see %s %s --help", command, fs.Arg(0), Prog, command)
	}
	return false, nil
}

// Group is a titled set of flags for --help, by name, in the order shown.
type Group struct {
	Title string
	Names []string
}

// PrintFlags lists fs's flags the way users type them (--name VALUE), one
// titled section per group; flags no group names come last under "Other
// flags", and with no groups at all under "Flags". A flag whose usage
// starts with "(hidden)" is left out (a development flag).
func PrintFlags(w io.Writer, fs *flag.FlagSet, groups []Group) {
	shown := map[string]bool{}
	section := func(title string, names []string) {
		var flags []*flag.Flag
		for _, n := range names {
			if f := fs.Lookup(n); f != nil && !shown[n] && !Hidden(f) {
				flags = append(flags, f)
				shown[n] = true
			}
		}
		if len(flags) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, f := range flags {
			printFlag(w, f)
		}
	}
	for _, g := range groups {
		section(g.Title, g.Names)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) { rest = append(rest, f.Name) })
	title := "Other flags"
	if len(groups) == 0 {
		title = "Flags"
	}
	section(title, rest)
}

// Hidden reports a development flag, left out of --help.
func Hidden(f *flag.Flag) bool { return strings.HasPrefix(f.Usage, "(hidden)") }

func printFlag(w io.Writer, f *flag.Flag) {
	name, usage := flag.UnquoteUsage(f)
	switch name { // the flag package's type names, as a placeholder
	case "int", "uint":
		name = "N"
	case "float":
		name = "X"
	case "duration":
		name = "DURATION"
	case "string", "value":
		name = "VALUE"
	}
	head := "--" + f.Name
	if opt, ok := f.Value.(interface{ OptionalValue() string }); ok {
		head += "[=" + opt.OptionalValue() + "]" // --stats[=FILE]
	} else if name != "" {
		head += " " + name
	}
	if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
		usage += " (default " + f.DefValue + ")"
	}
	fmt.Fprintf(w, "  %s\n", head)
	for _, line := range strings.Split(usage, "\n") {
		if strings.HasPrefix(line, " ") { // a table row: kept as written
			fmt.Fprintf(w, "      %s\n", line)
			continue
		}
		for _, l := range textwrap.Columns(line, helpWidth) {
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
}

// helpWidth is the width --help wraps a flag's text to (after its indent),
// so that it reads in an 80-column terminal.
const helpWidth = 72
