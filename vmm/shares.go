package vmm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"tinyvmm/sharefs"
	"tinyvmm/virtio/pci"
	"tinyvmm/virtiofs"
)

// ShareConfig is one host directory the guest mounts over virtio-fs.
type ShareConfig struct {
	HostDir   string // absolute
	GuestPath string // absolute; where the default guest's init mounts it
	ReadOnly  bool   // the device refuses every change
}

// shareDevice is one --share (or the --root tree): the host tree, its
// virtio-fs device and transport.
type shareDevice struct {
	cfg       ShareConfig
	fs        *sharefs.Share
	dev       *virtiofs.Device
	transport *pci.Transport
}

// shareTag is the mount tag of the i-th share.
func shareTag(i int) string { return fmt.Sprintf("tinyvmm%d", i) }

// rootTag is the mount tag of the --root tree.
const rootTag = "tinyvmm-root"

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
// [tag, guest path] pairs ([tag, guest path, "ro"] for a read-only one).
func SharesArg(shares []ShareConfig) string {
	pairs := make([][]string, len(shares))
	for i, s := range shares {
		pairs[i] = []string{shareTag(i), s.GuestPath}
		if s.ReadOnly {
			pairs[i] = append(pairs[i], "ro")
		}
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
	var args []string
	if len(c.Shares) > 0 {
		args = append(args, SharesArg(c.Shares))
	}
	shares := c.Shares
	if c.Root != "" {
		args = append(args, "tinyvmm.root="+rootTag)
		if len(c.Env) > 0 {
			j, _ := json.Marshal(c.Env)
			args = append(args, "tinyvmm.env="+base64.RawURLEncoding.EncodeToString(j))
		}
		// The working directory is found through the root too.
		shares = append([]ShareConfig{{HostDir: c.Root, GuestPath: "/"}}, shares...)
	}
	if wd := GuestWorkDir(shares, c.WorkDir); wd != "" && len(c.Command) > 0 {
		args = append(args, "tinyvmm.cwd="+base64.RawURLEncoding.EncodeToString([]byte(wd)))
	}
	return strings.Join(args, " ")
}

// openShares opens each shared directory and makes its device. It needs
// no KVM, so a missing directory is reported before /dev/kvm.
func (m *machine) openShares() error {
	open := func(tag string, sc ShareConfig) error {
		fs, err := sharefs.Open(sc.HostDir)
		if err != nil {
			return err
		}
		m.onTeardown(func() { fs.Close() })
		// A request queue per vCPU: the default guest's kernel sends
		// each CPU's requests on the queue whose interrupt goes to that
		// CPU, so readers on different vCPUs share no ring, lock or
		// completion worker (Linux 6.1 alone uses the first queue).
		cfg := virtiofs.Config{Tag: tag, Share: fs, ReadOnly: sc.ReadOnly, Cache: m.cfg.ShareCache,
			RequestQueues: max(m.cfg.CPUs, 1),
			Logf:          func(format string, args ...any) { m.logf(format, args...) }}
		if sc.ReadOnly {
			// The host's own tree, which nothing in the guest
			// changes and the host seldom does while it runs: names,
			// attributes, pages and listings kept (the host's own
			// changes show within the policy's timeout).
			cfg.Cache = virtiofs.CacheAlways
		}
		dev, err := virtiofs.New(cfg)
		if err != nil {
			return err
		}
		m.shares = append(m.shares, &shareDevice{cfg: sc, fs: fs, dev: dev})
		return nil
	}
	for i, sc := range m.cfg.Shares {
		if err := open(shareTag(i), sc); err != nil {
			return err
		}
	}
	if m.cfg.Root != "" {
		return open(rootTag, ShareConfig{HostDir: m.cfg.Root, GuestPath: "/", ReadOnly: true})
	}
	return nil
}

// stopShares stops every share's worker while guest memory is still mapped.
func (m *machine) stopShares() {
	for _, s := range m.shares {
		s.dev.Reset()
	}
}
