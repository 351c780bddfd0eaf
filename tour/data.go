package tour

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A run's Result crosses from the nested L1 to the host on L1's console:
// JSON in base64 lines that start with dataPrefix, then dataEnd and the
// JSON's length. Short lines, because L1's kernel may print between them.
const (
	dataPrefix = "tour-data "
	dataEnd    = "tour-data-end "
	dataWidth  = 64
)

// WriteData writes r for DataReader.
func WriteData(w io.Writer, r Result) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	enc := base64.StdEncoding.EncodeToString(raw)
	var b strings.Builder
	for len(enc) > 0 {
		n := min(dataWidth, len(enc))
		b.WriteString(dataPrefix + enc[:n] + "\n")
		enc = enc[n:]
	}
	fmt.Fprintf(&b, "%s%d\n", dataEnd, len(raw))
	_, err = io.WriteString(w, b.String())
	return err
}

// DataReader collects what WriteData wrote from a console's lines.
type DataReader struct {
	enc  strings.Builder
	n    int
	done bool
}

// Line takes one console line and says whether it was data.
func (d *DataReader) Line(l string) bool {
	l = strings.TrimRight(l, "\r")
	switch {
	case d.done:
		return false
	case strings.HasPrefix(l, dataPrefix):
		d.enc.WriteString(strings.TrimPrefix(l, dataPrefix))
	case strings.HasPrefix(l, dataEnd):
		n, err := strconv.Atoi(strings.TrimPrefix(l, dataEnd))
		if err != nil {
			n = -1
		}
		d.n, d.done = n, true
	default:
		return false
	}
	return true
}

// Done says whether the end line was seen.
func (d *DataReader) Done() bool { return d.done }

// Result decodes what was collected.
func (d *DataReader) Result() (Result, error) {
	var r Result
	if !d.done {
		return r, fmt.Errorf("no %q line: the run's data did not arrive whole", strings.TrimSpace(dataEnd))
	}
	raw, err := base64.StdEncoding.DecodeString(d.enc.String())
	if err != nil {
		return r, fmt.Errorf("the run's data: %v", err)
	}
	if len(raw) != d.n {
		return r, fmt.Errorf("the run's data is %d bytes, its end line says %d", len(raw), d.n)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("the run's data: %v", err)
	}
	return r, nil
}
