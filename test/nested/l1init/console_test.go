package main

import (
	"os"
	"path/filepath"
	"testing"
)

// quietConsole lowers only the console's level, the first of printk's
// four fields, and refuses a file that is not printk's shape.
func TestQuietConsole(t *testing.T) {
	p := filepath.Join(t.TempDir(), "printk")
	if err := os.WriteFile(p, []byte("7\t4\t1\t7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := quietConsole(p); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "5 4 1 7" {
		t.Errorf("printk now %q, want %q", b, "5 4 1 7")
	}
	os.WriteFile(p, []byte("7 4\n"), 0o644)
	if err := quietConsole(p); err == nil {
		t.Error("a printk of two fields was taken")
	}
	if err := quietConsole(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing printk was no error")
	}
}
