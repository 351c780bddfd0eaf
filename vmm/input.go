package vmm

import (
	"fmt"
	"io"
	"os"

	"tinyvmm/boot"
)

// inputFile is an open kernel or initrd: boot reads its headers and then
// each segment straight into guest RAM, so tinyvmm never buffers the file.
type inputFile struct {
	*os.File
	size int64
}

func (f inputFile) Size() int64 { return f.size }

// openInput opens what Config names for boot to read: data when the caller
// handed the image in memory, else the file at path. Something that cannot
// be read at offsets (a pipe) is read whole. close is never nil.
func openInput(path string, data []byte, what string) (f boot.File, close func(), err error) {
	nothing := func() {}
	if data != nil {
		return boot.Bytes(data), nothing, nil
	}
	if path == "" {
		return nil, nothing, nil
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	switch {
	case st.Mode().IsRegular():
		return inputFile{fh, st.Size()}, func() { fh.Close() }, nil
	case st.IsDir():
		fh.Close()
		return nil, nothing, fmt.Errorf("cannot read %s %s: is a directory", what, path)
	}
	defer fh.Close()
	b, err := io.ReadAll(fh)
	if err != nil {
		return nil, nothing, fmt.Errorf("cannot read %s %s: %v", what, path, errText(err))
	}
	return boot.Bytes(b), nothing, nil
}

// errText drops the "open PATH:" prefix Go puts on file errors, since the
// message already names the file.
func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
