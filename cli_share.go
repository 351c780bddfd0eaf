package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"tinyvmm/virtiofs"
	"tinyvmm/vmm"
)

// sharesValue is a repeatable --share HOSTDIR[:GUESTPATH].
type sharesValue struct{ shares *[]vmm.ShareConfig }

func (v sharesValue) String() string { return "" }

func (v sharesValue) Set(s string) error {
	host, guest := s, ""
	if i := strings.LastIndex(s, ":"); i >= 0 && strings.HasPrefix(s[i+1:], "/") {
		host, guest = s[:i], s[i+1:]
	}
	abs, err := filepath.Abs(host)
	if err != nil || host == "" {
		return fmt.Errorf("--share %q: give HOSTDIR[:GUESTPATH]", s)
	}
	real, err := realDir(abs)
	if err != nil {
		return fmt.Errorf("--share %s: %v", host, errText(err))
	}
	if guest == "" {
		guest = abs // the same path inside, as the user sees it
	}
	*v.shares = append(*v.shares, vmm.ShareConfig{HostDir: real, GuestPath: filepath.Clean(guest)})
	return nil
}

// hostWorkDir is the working directory with symlinks resolved, as the
// shares' host directories are, so that the guest can run there.
func hostWorkDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(wd); err == nil {
		return real
	}
	return wd
}

// realDir resolves the symlinks of the absolute path abs and wants a
// directory there.
func realDir(abs string) (string, error) {
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(real); err != nil {
		return "", err
	} else if !fi.IsDir() {
		return "", fmt.Errorf("not a directory")
	}
	return real, nil
}

func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// rootValue is --root DIR: a directory, symlinks resolved.
type rootValue struct{ root *string }

func (v rootValue) String() string { return "" }

func (v rootValue) Set(s string) error {
	abs, err := filepath.Abs(s)
	if err != nil || s == "" {
		return fmt.Errorf("--root %q: give a directory, / for the host's own", s)
	}
	real, err := realDir(abs)
	if err != nil {
		return fmt.Errorf("--root %s: %v", s, errText(err))
	}
	*v.root = real
	return nil
}

// rootEnv are the variables of tinyvmm's environment a --root guest's
// command gets, so that it finds the host's tools and settings as the
// user's shell would: the rest (sockets, sessions, secrets) stays out, and
// the kernel command line that carries them is short.
var rootEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "TZ",
	"GOPATH", "GOROOT", "GOFLAGS", "GOCACHE", "GOMODCACHE", "GOPROXY", "GOTOOLCHAIN", "CGO_ENABLED"}

// hostEnv is rootEnv's variables that are set, as KEY=VALUE.
func hostEnv() []string {
	var env []string
	for _, k := range rootEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// withWorkDir adds the working directory to a --root guest's shares,
// writable at its path in the guest (the same path with --root /), so the
// command's output files (a coverage profile, say) land on the host, and
// a directory under the guest's fresh /tmp is there too. A share that
// already holds it is enough.
func withWorkDir(shares []vmm.ShareConfig, root, wd string) []vmm.ShareConfig {
	if wd == "" || wd == "/" || vmm.GuestWorkDir(shares, wd) != "" {
		return shares
	}
	guest := wd
	if rel, err := filepath.Rel(root, wd); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		guest = filepath.Join("/", rel)
	}
	if guest == "/" {
		return shares
	}
	for _, s := range shares {
		if s.GuestPath == guest {
			return shares
		}
	}
	return append(shares, vmm.ShareConfig{HostDir: wd, GuestPath: guest})
}

// shareCacheValue is --share-cache auto|always.
type shareCacheValue struct{ c *virtiofs.Cache }

func (v shareCacheValue) String() string {
	if v.c == nil {
		return ""
	}
	return v.c.String()
}

func (v shareCacheValue) Set(s string) error {
	c, err := virtiofs.ParseCache(s)
	if err != nil {
		return err
	}
	*v.c = c
	return nil
}
