package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Kernel parameters from tinyvmm's --share.
const (
	// sharesParam: base64url (no padding) of a JSON array of [tag, path].
	sharesParam = "tinyvmm.shares"
	// cwdParam: base64url of the directory the command runs in.
	cwdParam = "tinyvmm.cwd"
)

// share is one virtio-fs mount: the device's tag, the guest path, and
// whether it is read-only.
type share struct {
	tag, path string
	ro        bool
}

func decodeShares(encoded string) ([]share, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(encoded, "="))
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", err)
	}
	var entries [][]string
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("not a JSON array of [tag, path]: %w", err)
	}
	var out []share
	for _, e := range entries {
		if len(e) < 2 || len(e) > 3 || e[0] == "" || !filepath.IsAbs(e[1]) || strings.ContainsAny(e[0]+e[1], "\x00,") ||
			(len(e) == 3 && e[2] != "ro") {
			return nil, fmt.Errorf("bad share %q", e)
		}
		out = append(out, share{tag: e[0], path: filepath.Clean(e[1]), ro: len(e) == 3})
	}
	return out, nil
}

// mountShares mounts each share below prefix ("" or the new root), going
// on past a failure.
func mountShares(prefix string, shares []share) error {
	var errs []error
	for _, s := range shares {
		target := filepath.Join("/", prefix, s.path)
		if err := os.MkdirAll(target, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("share %s: %w", s.path, err))
			continue
		}
		var flags uintptr
		if s.ro {
			flags = unix.MS_RDONLY
		}
		if err := unix.Mount(s.tag, target, "virtiofs", flags, ""); err != nil {
			errs = append(errs, fmt.Errorf("mount share %s on %s: %w", s.tag, s.path, err))
			continue
		}
		if err := setReadahead(target); err != nil {
			warn(err)
		}
	}
	return errors.Join(errs...)
}

// readaheadKiB is the readahead window of a virtio-fs mount. FUSE starts
// at 128 KiB, so a sequential read waits on one 128 KiB request after
// another; with 4 MiB the kernel keeps several of the device's largest
// READs (1 MiB) in flight ahead of the reader.
const readaheadKiB = 4096

// setReadahead sets the readahead window of the file system mounted at
// dir, through its backing device's sysfs entry (FUSE's is named by the
// mount's device number).
//
// Only once FUSE's INIT is answered: the kernel then lowers the window to
// the reply's max_readahead (the 128 KiB it asked with), so a window set
// before that is lost. mount returns before the answer, and a stat need
// not wait for it (the root's attributes can pass for fresh without a
// request), but a statfs always sends a request, which waits for INIT.
func setReadahead(dir string) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(p, []byte(fmt.Sprint(readaheadKiB)), 0); err != nil {
		return fmt.Errorf("readahead of %s: %w", dir, err)
	}
	return nil
}
