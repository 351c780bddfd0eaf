package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tinyvmm/vmm"
)

func TestShareFlag(t *testing.T) {
	dir := t.TempDir()
	real, _ := filepath.EvalSymlinks(dir)
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(dir, link)
	var got []vmm.ShareConfig
	v := sharesValue{&got}
	for _, s := range []string{dir, dir + ":/mnt/x/", link} {
		if err := v.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	want := []vmm.ShareConfig{{HostDir: real, GuestPath: dir}, {HostDir: real, GuestPath: "/mnt/x"}, {HostDir: real, GuestPath: link}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("share %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", filepath.Join(dir, "missing"), file} {
		if err := v.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
	// A bad --share is a usage error, found before anything is loaded.
	var stdout, stderr strings.Builder
	if status := runMain([]string{"--share", file, "--", "true"}, &stdout, &stderr); status != exitUsage || !strings.Contains(stderr.String(), "not a directory") {
		t.Errorf("status %d, stderr %q", status, stderr.String())
	}
	stderr.Reset()
	if status := runMain([]string{"--timeout", "-1s", "--", "true"}, &stdout, &stderr); status != exitUsage {
		t.Errorf("negative timeout: status %d, stderr %q", status, stderr.String())
	}
}

func TestWithWorkDir(t *testing.T) {
	got := withWorkDir(nil, "/", "/home/u/src")
	if len(got) != 1 || got[0].HostDir != "/home/u/src" || got[0].GuestPath != "/home/u/src" || got[0].ReadOnly {
		t.Fatalf("--root /: %+v", got)
	}
	if got := withWorkDir(nil, "/srv/root", "/srv/root/work"); len(got) != 1 || got[0].GuestPath != "/work" {
		t.Fatalf("--root /srv/root: %+v", got)
	}
	held := []vmm.ShareConfig{{HostDir: "/home/u", GuestPath: "/home/u"}}
	if got := withWorkDir(held, "/", "/home/u/src"); len(got) != 1 {
		t.Fatalf("a share holds it already: %+v", got)
	}
	if got := withWorkDir(nil, "/", "/"); len(got) != 0 {
		t.Fatalf("working directory /: %+v", got)
	}
}
