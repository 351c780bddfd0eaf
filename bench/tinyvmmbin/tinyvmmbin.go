// Package tinyvmmbin finds the binaries the lab's benchmarks run: the
// product, tinyvmm, which boots the VMs, and the lab command itself.
package tinyvmmbin

import (
	"fmt"
	"os"
	"path/filepath"
)

// Name is the product binary's file name.
const Name = "tinyvmm"

// Path returns the tinyvmm binary beside the running executable, where
// `make build` puts it (bin/tinyvmm beside bin/tinyvmm-lab), or
// $TINYVMM_BIN when set.
func Path() (string, error) {
	if p := os.Getenv("TINYVMM_BIN"); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), Name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no %s beside %s (make build puts both in bin/; or set TINYVMM_BIN)", Name, self)
	}
	return p, nil
}
