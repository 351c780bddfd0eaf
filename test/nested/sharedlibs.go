package nested

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// loaderDirs are the directories glibc's dynamic loader searches on Debian
// x86-64 after an object's RUNPATH when there is no /etc/ld.so.cache. L1 has
// none, so a library counts as found only where L1's loader will find it.
var loaderDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// elfDeps is what the dynamic loader reads from one ELF file.
type elfDeps struct {
	Interp  string   // PT_INTERP: the loader an executable names
	Needed  []string // DT_NEEDED
	RunPath []string // DT_RUNPATH, or DT_RPATH when there is none
	Class   elf.Class
	Machine elf.Machine
}

// readELFDeps reads p's loader-relevant parts; a missing file is an error
// wrapping fs.ErrNotExist.
func readELFDeps(p string) (elfDeps, error) {
	f, err := elf.Open(p)
	if err != nil {
		return elfDeps{}, err
	}
	defer f.Close()
	d := elfDeps{Class: f.Class, Machine: f.Machine}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return d, fmt.Errorf("%s: PT_INTERP: %v", p, err)
		}
		d.Interp = strings.TrimRight(string(b), "\x00")
	}
	if f.Section(".dynamic") == nil {
		return d, nil // static
	}
	if d.Needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return d, fmt.Errorf("%s: DT_NEEDED: %v", p, err)
	}
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	if len(runpath) == 0 {
		runpath, _ = f.DynString(elf.DT_RPATH)
	}
	for _, rp := range runpath {
		d.RunPath = append(d.RunPath, strings.Split(rp, ":")...)
	}
	return d, nil
}

// SharedLibraries returns the dynamic loader and every shared library that
// the executable bin needs, directly or through other libraries, as absolute
// paths, found the way a loader without ld.so.cache finds them: the needing
// object's RUNPATH ($ORIGIN expanded), then loaderDirs. Libraries of another
// ELF class or machine are passed over, as the loader does. A static
// executable needs nothing.
func SharedLibraries(bin string) ([]string, error) {
	return libResolver{dirs: loaderDirs, read: readELFDeps}.resolve(bin)
}

// libResolver walks DT_NEEDED; read is swapped out in tests.
type libResolver struct {
	dirs []string
	read func(path string) (elfDeps, error)
}

func (r libResolver) resolve(bin string) ([]string, error) {
	exe, err := r.read(bin)
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{} // sonames and paths already placed
	if exe.Interp != "" {
		if _, err := r.read(exe.Interp); err != nil {
			return nil, fmt.Errorf("%s: its loader: %w", bin, err)
		}
		out = append(out, exe.Interp)
		seen[exe.Interp], seen[path.Base(exe.Interp)] = true, true
	}
	type object struct {
		path string
		deps elfDeps
	}
	queue := []object{{bin, exe}}
	for len(queue) > 0 {
		obj := queue[0]
		queue = queue[1:]
		for _, name := range obj.deps.Needed {
			if seen[name] {
				continue
			}
			p, deps, err := r.find(name, obj.path, obj.deps.RunPath, exe)
			if err != nil {
				return nil, err
			}
			seen[name] = true
			if seen[p] {
				continue
			}
			seen[p] = true
			out = append(out, p)
			queue = append(queue, object{p, deps})
		}
	}
	return out, nil
}

// find locates the library name that the object at needer asks for.
func (r libResolver) find(name, needer string, runpath []string, exe elfDeps) (string, elfDeps, error) {
	var dirs []string
	if strings.Contains(name, "/") {
		dirs = []string{""} // a path, used as it is
	} else {
		for _, d := range runpath {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", path.Dir(needer))
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		dirs = append(dirs, r.dirs...)
	}
	for _, d := range dirs {
		p := path.Clean(path.Join(d, name))
		deps, err := r.read(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return "", deps, fmt.Errorf("%s (needed by %s): %w", name, needer, err)
		case deps.Class != exe.Class || deps.Machine != exe.Machine:
			continue // e.g. a 32-bit library in /lib
		}
		return p, deps, nil
	}
	return "", elfDeps{}, fmt.Errorf("%s (needed by %s): not found in %s", name, needer, strings.Join(dirs, ", "))
}
