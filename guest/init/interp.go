package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
)

// explainStartError turns a failed exec into a message that says what to do.
// The kernel answers ENOENT both for a missing program and for an ELF whose
// interpreter (the dynamic loader) is missing, and the second is what a user
// meets first: a dynamically linked host binary brought into a guest that has
// no /lib. Name the interpreter so the cause is plain.
func explainStartError(path string, err error) error {
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	interp, ierr := elfInterpreter(path)
	if ierr != nil || interp == "" {
		return err
	}
	if _, serr := os.Stat(interp); serr == nil {
		return err
	}
	return fmt.Errorf("%s is dynamically linked and its interpreter %s is not in this guest: build it static (for Go: CGO_ENABLED=0 go test -c), or boot with the host's root", path, interp)
}

// elfInterpreter returns the PT_INTERP path of an ELF file, "" for a static one.
func elfInterpreter(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		buf := make([]byte, p.Filesz)
		if _, err := p.ReadAt(buf, 0); err != nil {
			return "", err
		}
		for len(buf) > 0 && buf[len(buf)-1] == 0 {
			buf = buf[:len(buf)-1]
		}
		return string(buf), nil
	}
	return "", nil
}
