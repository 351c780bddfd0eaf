package tinyvmmbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	t.Setenv("TINYVMM_BIN", "")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(filepath.Dir(self), Name)
	if _, err := os.Stat(beside); err == nil {
		t.Skipf("%s exists: the test binary's directory is not a scratch one", beside)
	}
	if _, err := Path(); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("no tinyvmm beside the test binary: err %v, want one saying make build", err)
	}
	if err := os.WriteFile(beside, nil, 0o755); err != nil {
		t.Skip(err)
	}
	defer os.Remove(beside)
	if p, err := Path(); err != nil || p != beside {
		t.Errorf("Path() = %q, %v; want %q", p, err, beside)
	}
	t.Setenv("TINYVMM_BIN", "/opt/x/tinyvmm")
	if p, err := Path(); err != nil || p != "/opt/x/tinyvmm" {
		t.Errorf("with TINYVMM_BIN: %q, %v", p, err)
	}
}
