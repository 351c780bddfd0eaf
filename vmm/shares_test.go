package vmm

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestSharesArg(t *testing.T) {
	got := SharesArg([]ShareConfig{{HostDir: "/h", GuestPath: "/mnt/a"}, {HostDir: "/x", GuestPath: "/x y"}})
	// guest/init's TestParseShares decodes this same string.
	want := "tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["tinyvmm0","/mnt/a"],["tinyvmm1","/x y"]]`))
	if got != want {
		t.Fatalf("SharesArg = %q, want %q", got, want)
	}
}

func TestGuestWorkDir(t *testing.T) {
	shares := []ShareConfig{{HostDir: "/home/u/src", GuestPath: "/src"}, {HostDir: "/home/u/src/sub", GuestPath: "/sub"}}
	for dir, want := range map[string]string{
		"/home/u/src":         "/src",
		"/home/u/src/pkg/a":   "/src/pkg/a",
		"/home/u/src/sub/b":   "/sub/b", // the innermost share wins
		"/home/u/srcx":        "",
		"/home/u":             "",
		"":                    "",
		"/home/u/src/../etc/": "",
	} {
		if got := GuestWorkDir(shares, dir); got != want {
			t.Errorf("GuestWorkDir(%q) = %q, want %q", dir, got, want)
		}
	}
	c := Config{Shares: shares, WorkDir: "/home/u/src/pkg", Command: []string{"./pkg.test"}}
	if args := c.initArgs(); !strings.Contains(args, " tinyvmm.cwd="+base64.RawURLEncoding.EncodeToString([]byte("/src/pkg"))) {
		t.Errorf("initArgs = %q", args)
	}
	c.Command = nil // a shell starts in /
	if args := c.initArgs(); strings.Contains(args, "cwd") {
		t.Errorf("initArgs without a command = %q", args)
	}
}

func TestCheckShares(t *testing.T) {
	for _, bad := range [][]ShareConfig{
		{{HostDir: "rel", GuestPath: "/a"}},
		{{HostDir: "/a", GuestPath: "rel"}},
		{{HostDir: "/a", GuestPath: "/"}},
		{{HostDir: "/a", GuestPath: "/x/../y"}},
		{{HostDir: "/a", GuestPath: "/m"}, {HostDir: "/b", GuestPath: "/m"}},
	} {
		if err := checkShares(bad); err == nil {
			t.Errorf("checkShares(%+v) accepted", bad)
		}
	}
	if err := checkShares([]ShareConfig{{HostDir: "/a", GuestPath: "/a"}, {HostDir: "/a", GuestPath: "/b"}}); err != nil {
		t.Error(err)
	}
}

func TestRootInitArgs(t *testing.T) {
	c := Config{Root: "/", WorkDir: "/home/u/src/pkg", Command: []string{"go", "test"}, Env: []string{"PATH=/usr/bin"},
		Shares: []ShareConfig{{HostDir: "/home/u/out", GuestPath: "/home/u/out"}}}
	args := c.initArgs()
	for _, want := range []string{
		"tinyvmm.root=tinyvmm-root",
		"tinyvmm.env=" + base64.RawURLEncoding.EncodeToString([]byte(`["PATH=/usr/bin"]`)),
		// The working directory through the root, at the same path.
		"tinyvmm.cwd=" + base64.RawURLEncoding.EncodeToString([]byte("/home/u/src/pkg")),
		"tinyvmm.shares=",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("initArgs = %q, want %q in it", args, want)
		}
	}
	ro := SharesArg([]ShareConfig{{HostDir: "/h", GuestPath: "/m", ReadOnly: true}})
	if want := "tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["tinyvmm0","/m","ro"]]`)); ro != want {
		t.Errorf("SharesArg read-only = %q, want %q", ro, want)
	}
}

// TestShareQueuePerCPU: each share offers a request queue per vCPU, the
// root's too.
func TestShareQueuePerCPU(t *testing.T) {
	m := &machine{cfg: Config{CPUs: 3, Root: t.TempDir(), Shares: []ShareConfig{{HostDir: t.TempDir(), GuestPath: "/mnt"}}}}
	defer m.close()
	if err := m.openShares(); err != nil {
		t.Fatal(err)
	}
	if len(m.shares) != 2 {
		t.Fatalf("%d shares", len(m.shares))
	}
	for _, s := range m.shares {
		if n := len(s.dev.QueueMaxSizes()); n != 4 {
			t.Errorf("%s: %d queues, want hiprio and 3 request queues", s.dev.Tag(), n)
		}
	}
}
