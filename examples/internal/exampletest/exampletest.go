// Package exampletest lets an example's test binary stand in for the
// example program. In the nested L1 (test/nested) there is no Go toolchain,
// so GUIDE.md's `go run ./examples/NAME` runs there as NAME.test with
// EnvMain set, which runs the example's main instead of its tests.
package exampletest

import (
	"os"
	"testing"
)

// EnvMain, when set, makes Main run the program instead of the tests.
const EnvMain = "TINYVMM_EXAMPLE_MAIN"

// Main is an example's TestMain: main when EnvMain is set, the tests
// otherwise.
func Main(m *testing.M, main func()) {
	if os.Getenv(EnvMain) != "" {
		main() // exits non-zero itself on failure
		os.Exit(0)
	}
	os.Exit(m.Run())
}
