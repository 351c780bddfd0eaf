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
	return Usagef("%s; see tinyvmm %s --help", Message(err), command)
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
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return true, nil
	} else if err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, Usagef("%s: unexpected argument %q; see tinyvmm %s --help", command, fs.Arg(0), command)
	}
	return false, nil
}
