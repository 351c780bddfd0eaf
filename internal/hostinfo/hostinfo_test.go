package hostinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	m := Describe()
	if m.CPUs != runtime.NumCPU() || !strings.HasPrefix(m.Kernel, "Linux ") || len(strings.Fields(m.LoadAvg)) != 3 {
		t.Errorf("Describe() = %+v", m)
	}
}
