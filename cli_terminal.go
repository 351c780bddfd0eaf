package main

import (
	"bytes"
	"io"
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// rawTerminal puts stdin in raw mode so every key reaches the guest, and
// gives back the function that restores it (a no-op when stdin is not a
// terminal).
func rawTerminal(f *os.File) (restore func(), ok bool) {
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return func() {}, false
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return func() {}, false
	}
	return func() { term.Restore(fd, old) }, true
}

// crlfWriter turns "\n" into "\r\n": tinyvmm's own notices written while
// the terminal is raw (no output processing) still start at column 0.
type crlfWriter struct{ w io.Writer }

func (c crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
