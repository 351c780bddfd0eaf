// Command initramfs writes the tinyvmm guest's initramfs: an uncompressed
// newc cpio with /init, optionally busybox and its applet links, /dev nodes
// and a minimal /etc.
//
//	go run ./guest/initramfs -init out/guest/init -busybox /bin/busybox -o out/guest/initramfs.cpio
//	go run ./guest/initramfs -init out/guest/pause -o out/guest/initramfs-pause.cpio
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	initPath := flag.String("init", "", "the program to install as /init (required)")
	busyboxPath := flag.String("busybox", "", "a static busybox to install as /bin/busybox with its applet links")
	outPath := flag.String("o", "", "the cpio file to write (required)")
	flag.Parse()
	if *initPath == "" || *outPath == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: initramfs -init FILE [-busybox FILE] -o OUT.cpio")
		os.Exit(2)
	}
	n, err := build(*initPath, *busyboxPath, *outPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "initramfs: "+err.Error())
		os.Exit(1)
	}
	fmt.Printf("initramfs: wrote %s (%d entries)\n", *outPath, n)
}

func build(initPath, busyboxPath, outPath string) (int, error) {
	var s spec
	var err error
	if s.init, err = os.ReadFile(initPath); err != nil {
		return 0, fmt.Errorf("cannot read the init program: %w", err)
	}
	if busyboxPath != "" {
		if s.busybox, err = os.ReadFile(busyboxPath); err != nil {
			return 0, fmt.Errorf("cannot read busybox: %w (apt-get install busybox-static)", err)
		}
		if s.applets, err = listApplets(busyboxPath); err != nil {
			return 0, err
		}
	}
	recs, err := records(s)
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	if err := writeArchive(&buf, recs); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return 0, err
	}
	tmp := outPath + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return 0, err
	}
	return len(recs), os.Rename(tmp, outPath)
}

// listApplets asks busybox for its applets' install paths (bin/sh, ...).
func listApplets(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w (is it a static busybox for this machine?)", busybox, err)
	}
	var applets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			applets = append(applets, line)
		}
	}
	return applets, nil
}
