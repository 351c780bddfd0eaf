// Package netnstest is scratchns for tests: Setup skips where namespaces
// cannot be made and removes the namespace when the test ends. It is apart
// from scratchns so that the testing package stays out of the binary.
package netnstest

import (
	"testing"

	"tinyvmm/internal/scratchns"
)

// Setup is New for tests: it skips with one line when namespaces are not
// available and deletes the namespace in t.Cleanup, also on failure.
func Setup(t testing.TB) *scratchns.NS {
	t.Helper()
	if why := scratchns.Usable(); why != "" {
		t.Skip(why)
	}
	n, err := scratchns.New("tvt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}
