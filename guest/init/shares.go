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

// share is one virtio-9p mount: the device's tag and the guest path.
type share struct{ tag, path string }

// shareOptions: 9P2000.L over virtio with the largest msize Linux 6.1's
// virtio transport takes (PAGE_SIZE * 125 = 512000; more is cut to it with
// a warning), and cache=mmap: reads and writes go straight to the host,
// so both sides see each other's changes, while mmap and exec go through
// the page cache with readahead, which running a binary from the share
// needs to be fast.
const shareOptions = "trans=virtio,version=9p2000.L,msize=512000,cache=mmap"

func decodeShares(encoded string) ([]share, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(encoded, "="))
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", err)
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("not a JSON array of [tag, path]: %w", err)
	}
	var out []share
	for _, p := range pairs {
		if p[0] == "" || !filepath.IsAbs(p[1]) || strings.ContainsAny(p[0]+p[1], "\x00,") {
			return nil, fmt.Errorf("bad share %q at %q", p[0], p[1])
		}
		out = append(out, share{tag: p[0], path: filepath.Clean(p[1])})
	}
	return out, nil
}

// mountShares mounts each share, going on past a failure.
func mountShares(shares []share) error {
	var errs []error
	for _, s := range shares {
		if err := os.MkdirAll(s.path, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("share %s: %w", s.path, err))
			continue
		}
		if err := unix.Mount(s.tag, s.path, "9p", 0, shareOptions); err != nil {
			errs = append(errs, fmt.Errorf("mount share %s on %s: %w", s.tag, s.path, err))
		}
	}
	return errors.Join(errs...)
}
