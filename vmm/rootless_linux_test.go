package vmm

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
	"syscall"
)

// unprivilegedUID is who runs tinyvmm in the CLI tests when they run as
// root (as in the nested L1): no capabilities, and /dev/kvm only through
// its group, as a CI user gets it from the README's udev rule.
const unprivilegedUID = 1000

// unprivileged returns the credentials to run tinyvmm with: nil when the
// test is not root (it runs as itself), otherwise unprivilegedUID with
// /dev/kvm's group. It skips when /dev/kvm is not read-write for its group.
func unprivileged(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/kvm", &st); err != nil {
		t.Skip("no /dev/kvm")
	}
	if st.Mode&0o060 != 0o060 || st.Gid == 0 {
		t.Skipf("/dev/kvm is mode %o group %d: give it to a group read-write (README: the kvm group or udev rule) to test tinyvmm as a non-root user", st.Mode&0o777, st.Gid)
	}
	return &syscall.Credential{Uid: unprivilegedUID, Gid: unprivilegedUID, Groups: []uint32{st.Gid}}
}

// userDir is a fresh directory the unprivileged user owns (t.TempDir's
// parent is root's and closed to others).
func userDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tinyvmm-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred := unprivileged(t); cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// uidOf is the uid cmd runs as.
func uidOf(cmd *exec.Cmd) int {
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Credential != nil {
		return int(cmd.SysProcAttr.Credential.Uid)
	}
	return os.Geteuid()
}
