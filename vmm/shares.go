package vmm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"tinyvmm/sharefs"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtio9p"
)

// ShareConfig is one host directory the guest mounts over virtio-9p.
type ShareConfig struct {
	HostDir   string // absolute
	GuestPath string // absolute; where the default guest's init mounts it
}

// shareDevice is one --share: the host tree, its 9p device and transport.
type shareDevice struct {
	cfg       ShareConfig
	fs        *sharefs.Share
	dev       *virtio9p.Device
	transport *pci.Transport
}

// shareTag is the mount tag of the i-th share.
func shareTag(i int) string { return fmt.Sprintf("tinyvmm%d", i) }

// checkShares validates the --share paths without touching them.
func checkShares(shares []ShareConfig) error {
	seen := map[string]bool{}
	for _, s := range shares {
		switch {
		case !filepath.IsAbs(s.HostDir):
			return fmt.Errorf("--share %s: the host directory must be an absolute path", s.HostDir)
		case !filepath.IsAbs(s.GuestPath) || filepath.Clean(s.GuestPath) != s.GuestPath:
			return fmt.Errorf("--share %s:%s: the guest path must be absolute and clean", s.HostDir, s.GuestPath)
		case s.GuestPath == "/":
			return fmt.Errorf("--share %s:/: a share cannot be mounted over the guest's root", s.HostDir)
		case seen[s.GuestPath]:
			return fmt.Errorf("--share: two shares are mounted at %s", s.GuestPath)
		}
		seen[s.GuestPath] = true
	}
	return nil
}

// SharesArg is the kernel argument that tells the guest's init what to
// mount: tinyvmm.shares= and the unpadded base64url of a JSON array of
// [tag, guest path] pairs.
func SharesArg(shares []ShareConfig) string {
	pairs := make([][2]string, len(shares))
	for i, s := range shares {
		pairs[i] = [2]string{shareTag(i), s.GuestPath}
	}
	j, _ := json.Marshal(pairs)
	return "tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString(j)
}

// GuestWorkDir maps the host directory dir into the guest through the
// share that holds it (the innermost one), or returns "".
func GuestWorkDir(shares []ShareConfig, dir string) string {
	best, bestLen := "", -1
	for _, s := range shares {
		rel, err := filepath.Rel(s.HostDir, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || len(s.HostDir) <= bestLen {
			continue
		}
		best, bestLen = filepath.Join(s.GuestPath, rel), len(s.HostDir)
	}
	return best
}

// initArgs are the kernel arguments for the guest's init besides the
// command: the shares to mount and the working directory.
func (c *Config) initArgs() string {
	if len(c.Shares) == 0 {
		return ""
	}
	args := SharesArg(c.Shares)
	if wd := GuestWorkDir(c.Shares, c.WorkDir); wd != "" && len(c.Command) > 0 {
		args += " tinyvmm.cwd=" + base64.RawURLEncoding.EncodeToString([]byte(wd))
	}
	return args
}

// openShares opens each shared directory and makes its device. It needs
// no KVM, so a missing directory is reported before /dev/kvm.
func (m *machine) openShares() error {
	for i, sc := range m.cfg.Shares {
		fs, err := sharefs.Open(sc.HostDir)
		if err != nil {
			return err
		}
		m.onTeardown(func() { fs.Close() })
		dev, err := virtio9p.New(shareTag(i), fs, func(format string, args ...any) { m.logf(format, args...) })
		if err != nil {
			return err
		}
		m.shares = append(m.shares, &shareDevice{cfg: sc, fs: fs, dev: dev})
	}
	return nil
}

// stopShares stops every share's worker while guest memory is still mapped.
func (m *machine) stopShares() {
	for _, s := range m.shares {
		s.dev.Reset()
	}
}
