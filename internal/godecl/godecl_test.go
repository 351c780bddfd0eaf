package godecl

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDeclared(t *testing.T) {
	src := "package p\n\ntype T struct{}\ntype G[E any] struct{}\n\nconst C = 1\n\nvar V, W int\n\n" +
		"func F() {}\nfunc (t *T) M() {}\nfunc (g G[E]) N() {}\n"
	path := filepath.Join(t.TempDir(), "p.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := Declared(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"T", "G", "C", "V", "W", "F", "T.M", "G.N"} {
		if !names[n] {
			t.Errorf("%s not found", n)
		}
	}
	if len(names) != 8 || names["M"] {
		t.Errorf("declared %v, want exactly the 8 names", names)
	}
	if _, err := Declared(filepath.Join(t.TempDir(), "missing.go")); err == nil {
		t.Error("no error for a missing file")
	}
}
