package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

func init() { linuxCmds["ontty"] = cmdOnTTY }

// cmdOnTTY runs a program with its standard output on a terminal (a
// pseudo-terminal this test opens) and writes what the terminal received
// to FILE: `ontty FILE prog args...`, for what bridge prints to a person's
// screen.
func cmdOnTTY(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: ontty FILE prog args...")
	}
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	ts.Check(err)
	defer master.Close()
	ts.Check(unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	ts.Check(err)
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	ts.Check(err)
	prog := args[1]
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if p := filepath.Join(dir, args[1]); fileExists(p) {
			prog = p
			break
		}
	}
	cmd := exec.Command(prog, args[2:]...)
	cmd.Dir = ts.Getenv("WORK")
	for _, k := range []string{"PATH", "HOME", "WORK", "BRIDGE_ALLOW_ROOT", "GORACE", "TMPDIR"} {
		cmd.Env = append(cmd.Env, k+"="+ts.Getenv(k))
	}
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), slave, &stderr
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, master); close(done) }() // ends with EIO once no one holds the terminal
	err = cmd.Run()
	slave.Close()
	<-done
	ts.Logf("[stderr]\n%s", stderr.String())
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), out.Bytes(), 0o644))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
