package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	real, err := filepath.EvalSymlinks(abs)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(real); err == nil && !fi.IsDir() {
			err = fmt.Errorf("not a directory")
		}
	}
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

func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
