package main

import (
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
)

func TestSplitCmdline(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  console=ttyS0  quiet\n", []string{"console=ttyS0", "quiet"}},
		{`a="b c" "d e"=f g`, []string{"a=b c", "d e=f", "g"}},
		{"x=\"\"", []string{"x="}},
		{"tab\tsep", []string{"tab", "sep"}},
	}
	for _, c := range cases {
		if got := splitCmdline(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitCmdline(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDecodeArgvRoundTrip(t *testing.T) {
	for _, argv := range [][]string{
		{"sh", "-c", "echo hello; exit 7"},
		{"/bin/echo", "ünïcode", "with space", `quote"s`, ""},
		{"true"},
	} {
		enc := encodeArgv(argv)
		if strings.ContainsAny(enc, "+/= ") {
			t.Errorf("encoding %q is not unpadded base64url: %q", argv, enc)
		}
		got, err := decodeArgv(enc)
		if err != nil || !reflect.DeepEqual(got, argv) {
			t.Errorf("decodeArgv(encodeArgv(%q)) = %q, %v", argv, got, err)
		}
	}
}

func TestDecodeArgvKnownValue(t *testing.T) {
	// ["sh","-c","echo hello; exit 7"], encoded by hand with base64 -w0 | tr '+/' '-_' | tr -d =.
	got, err := decodeArgv("WyJzaCIsIi1jIiwiZWNobyBoZWxsbzsgZXhpdCA3Il0")
	want := []string{"sh", "-c", "echo hello; exit 7"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	// Padding is tolerated.
	if _, err := decodeArgv("WyJ0cnVlIl0="); err != nil {
		t.Errorf("padded input: %v", err)
	}
}

func TestDecodeArgvRejects(t *testing.T) {
	for name, enc := range map[string]string{
		"empty":           "",
		"not base64":      "!!!",
		"standard base64": "WyI/Il0+", // '/' and '+' are not base64url
		"not json":        encodeRaw("hello"),
		"json object":     encodeRaw(`{"a":1}`),
		"numbers":         encodeRaw(`[1,2]`),
		"empty array":     encodeRaw(`[]`),
		"null":            encodeRaw(`null`),
		"empty argv0":     encodeRaw(`["","x"]`),
		"nul byte":        encodeRaw(`["a\u0000b"]`),
	} {
		if argv, err := decodeArgv(enc); err == nil {
			t.Errorf("%s: decodeArgv(%q) = %q, want an error", name, enc, argv)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	cmd := encodeArgv([]string{"ping", "-c", "3", "10.0.0.1"})
	p, err := parseCmdline("console=ttyS0 ip=10.0.0.2::10.0.0.1:255.255.255.0::eth0:off tinyvmm.cmd=" + cmd + " quiet\n")
	if err != nil {
		t.Fatal(err)
	}
	if !p.hasIP || !reflect.DeepEqual(p.argv, []string{"ping", "-c", "3", "10.0.0.1"}) {
		t.Errorf("got %+v", p)
	}

	p, err = parseCmdline("console=ttyS0 noip=1 myip=2")
	if err != nil || p.hasIP || p.argv != nil {
		t.Errorf("no ip=, no command: got %+v, %v", p, err)
	}

	// After "--" the words are init's arguments, not parameters.
	p, err = parseCmdline("console=ttyS0 -- ip=1 tinyvmm.cmd=!!!")
	if err != nil || p.hasIP || p.argv != nil {
		t.Errorf("after --: got %+v, %v", p, err)
	}
}

func TestParseCmdlineRejects(t *testing.T) {
	for _, line := range []string{
		"tinyvmm.cmd=!!!",
		"tinyvmm.cmd",
		"tinyvmm.cmd=" + encodeArgv([]string{"a"}) + " tinyvmm.cmd=" + encodeArgv([]string{"b"}),
	} {
		if p, err := parseCmdline(line); err == nil {
			t.Errorf("parseCmdline(%q) = %+v, want an error", line, p)
		}
	}
}

func TestExitByte(t *testing.T) {
	for in, want := range map[int]byte{0: 0, 7: 7, 255: 255, 256: 255, -1: 255, 137: 137} {
		if got := exitByte(in); got != want {
			t.Errorf("exitByte(%d) = %d, want %d", in, got, want)
		}
	}
}

// encodeRaw encodes any string the way tinyvmm.cmd= is encoded.
func encodeRaw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestParseShares(t *testing.T) {
	// The string vmm's TestSharesArg expects tinyvmm to produce.
	arg := "tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["tinyvmm0","/mnt/a"],["tinyvmm1","/x y","ro"]]`))
	cwd := "tinyvmm.cwd=" + base64.RawURLEncoding.EncodeToString([]byte("/mnt/a/pkg"))
	p, err := parseCmdline("console=ttyS0 " + arg + " " + cwd)
	if err != nil {
		t.Fatal(err)
	}
	want := []share{{"tinyvmm0", "/mnt/a", false}, {"tinyvmm1", "/x y", true}}
	if !reflect.DeepEqual(p.shares, want) || p.cwd != "/mnt/a/pkg" {
		t.Fatalf("shares %+v cwd %q", p.shares, p.cwd)
	}
	for _, bad := range []string{
		"tinyvmm.shares=!!", "tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["t","rel"]]`)),
		"tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["a,b","/m"]]`)),
		"tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["t","/m","rw"]]`)),
		"tinyvmm.shares=" + base64.RawURLEncoding.EncodeToString([]byte(`[["t"]]`)),
		"tinyvmm.cwd=" + base64.RawURLEncoding.EncodeToString([]byte("rel")),
		"tinyvmm.env=" + base64.RawURLEncoding.EncodeToString([]byte(`["NOEQUALS"]`)),
		"tinyvmm.env=" + base64.RawURLEncoding.EncodeToString([]byte(`{"A":"B"}`)),
		"tinyvmm.root=a,b",
	} {
		if _, err := parseCmdline(bad); err == nil {
			t.Errorf("parseCmdline(%q) accepted", bad)
		}
	}
}

func TestParseRoot(t *testing.T) {
	env := "tinyvmm.env=" + base64.RawURLEncoding.EncodeToString([]byte(`["PATH=/usr/bin:/bin","HOME=/home/u"]`))
	p, err := parseCmdline("console=ttyS0 tinyvmm.root=tinyvmm-root " + env)
	if err != nil {
		t.Fatal(err)
	}
	if p.root != "tinyvmm-root" || !reflect.DeepEqual(p.env, []string{"PATH=/usr/bin:/bin", "HOME=/home/u"}) {
		t.Fatalf("root %q env %q", p.root, p.env)
	}
}
