package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// cmdParam is the kernel command-line parameter that carries the command to
// run: base64url (no padding) of a JSON array of strings, the argv.
const cmdParam = "tinyvmm.cmd"

// bootParams is what init needs from /proc/cmdline.
type bootParams struct {
	// argv is the decoded tinyvmm.cmd, nil when there is none.
	argv []string
	// hasIP is true when the kernel was given ip=: it configures eth0 itself.
	hasIP bool
	// shares are the virtio-fs shares to mount (tinyvmm.shares=).
	shares []share
	// cwd is where the command runs (tinyvmm.cwd=), "" for /.
	cwd string
	// root is the tag of the virtio-fs device to make the root
	// (tinyvmm.root=), "" for the initramfs.
	root string
	// env is added to the command's environment (tinyvmm.env=).
	env []string
}

// parseCmdline reads the parameters init cares about from the kernel command
// line. A malformed tinyvmm.cmd is an error; other parameters are ignored.
func parseCmdline(cmdline string) (bootParams, error) {
	var p bootParams
	seenCmd := false
	for _, word := range splitCmdline(cmdline) {
		if word == "--" {
			break // the rest is for init's argv, not kernel parameters
		}
		key, value, _ := strings.Cut(word, "=")
		switch key {
		case "ip":
			p.hasIP = true
		case cmdParam:
			if seenCmd {
				return bootParams{}, fmt.Errorf("%s is given more than once", cmdParam)
			}
			seenCmd = true
			argv, err := decodeArgv(value)
			if err != nil {
				return bootParams{}, fmt.Errorf("%s: %w", cmdParam, err)
			}
			p.argv = argv
		case sharesParam:
			shares, err := decodeShares(value)
			if err != nil {
				return bootParams{}, fmt.Errorf("%s: %w", sharesParam, err)
			}
			p.shares = shares
		case rootParam:
			if value == "" || strings.ContainsAny(value, ",\x00") {
				return bootParams{}, fmt.Errorf("%s: not a tag", rootParam)
			}
			p.root = value
		case envParam:
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(value, "="))
			var env []string
			if err == nil {
				err = json.Unmarshal(raw, &env)
			}
			for _, kv := range env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
					err = fmt.Errorf("%q is not KEY=VALUE", kv)
				}
			}
			if err != nil {
				return bootParams{}, fmt.Errorf("%s: %v", envParam, err)
			}
			p.env = env
		case cwdParam:
			raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(value, "="))
			if err != nil || !strings.HasPrefix(string(raw), "/") || strings.IndexByte(string(raw), 0) >= 0 {
				return bootParams{}, fmt.Errorf("%s: not the base64url of an absolute path", cwdParam)
			}
			p.cwd = string(raw)
		}
	}
	return p, nil
}

// splitCmdline splits a command line into words the way the kernel does:
// on spaces, except inside double quotes, which are removed.
func splitCmdline(s string) []string {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// decodeArgv decodes base64url (padding tolerated) of a JSON array of strings.
func decodeArgv(encoded string) ([]string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(encoded, "="))
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", err)
	}
	var argv []string
	if err := json.Unmarshal(raw, &argv); err != nil {
		return nil, fmt.Errorf("not a JSON array of strings: %w", err)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("empty command")
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errors.New("an argument contains a NUL byte")
		}
	}
	return argv, nil
}

// encodeArgv is the inverse of decodeArgv, for tests and documentation of
// the format (the host side has its own encoder).
func encodeArgv(argv []string) string {
	raw, _ := json.Marshal(argv)
	return base64.RawURLEncoding.EncodeToString(raw)
}
