package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/syncbridge/bridge/bridge/host"
)

// TestMain makes this test binary double as the bridge binary: testscript
// puts a copy of it named "bridge" on the scripts' PATH, and a process started
// under that name runs realMain, exactly like cmd/bridge's main. The scripts
// therefore exercise real processes: a real `bridge serve` daemon in the
// background, real signals, real exit codes.
func TestMain(m *testing.M) {
	// First, as in main: the daemon runs every op through the runner's
	// resource-limit shim, which re-executes this very binary.
	host.RunnerMain()
	// Eight scripts at a time unless -parallel says otherwise (the flags
	// are parsed after this): they mostly wait on `bridge serve` and its
	// ops; under the race detector on 2 cores the package went from about
	// 170 s to 127 s. (Not for every package: the runner's tests time out
	// eight at a time.)
	flag.Set("test.parallel", "8")
	// testscript.Main rather than the deprecated RunMain: it is the same
	// thing with the os.Exit moved into the command.
	testscript.Main(m, map[string]func(){
		"bridge": func() {
			// A script waits a second, not ten, for a wait to say that
			// the host published no liveness stamp (wait-timeout.txt);
			// only this test binary reads the variable.
			if d, err := time.ParseDuration(os.Getenv("BRIDGE_TEST_NO_STAMP_AFTER")); err == nil {
				noStampAfter = d
			}
			os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

// TestScripts runs testdata/*.txt. Each script has its own $WORK with a
// synced folder ($WORK/folder) shared by a host home and an agent home; no
// sync client is needed because both sides see the same directory.
//
// Extra script commands:
//
//	exitcode N prog args...    run prog like exec and require exit status N.
//	                           testscript's `! exec` only knows "non-zero",
//	                           and bridge's exit codes are part of its
//	                           interface (docs/CLI.md).
//	capture NAME FILE REGEXP   set $NAME to REGEXP's first group in FILE
//	                           (stdout and stderr mean the last command's),
//	                           e.g. a request id printed by `bridge run`.
//	waitfile FILE              wait (up to 30 s) until FILE exists and is
//	                           not empty (a shell creates a file before it
//	                           writes the line).
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Geteuid() == 0, nil
			case "systemd": // running as the init (sd_booted)
				_, err := os.Stat("/run/systemd/system")
				return err == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: scriptSetup,
		Cmds:  scriptCmds(),
	})
}

// scriptSetup gives each script its own user: HOME and the user config dir
// in $WORK.
func scriptSetup(env *testscript.Env) error {
	// testscript builds the environment from scratch, so a
	// BRIDGE_HOME of the developer never leaks in. HOME (an op's
	// default working directory) and the user config dir (the
	// default --home) point into $WORK, so nothing touches the
	// real user's files.
	home := filepath.Join(env.WorkDir, ".home")
	if err := os.Mkdir(home, 0o755); err != nil {
		return err
	}
	env.Setenv("HOME", home)
	// The real home, for a script that runs a toolchain found through it
	// (rustup's, pyenv's, Go's build cache: presets.txt).
	env.Setenv("REAL_HOME", os.Getenv("HOME"))
	env.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	// Tests (and CI) run as root; `serve` refuses that unless
	// allowed. errors.txt unsets it to check the refusal.
	env.Setenv("BRIDGE_ALLOW_ROOT", "1")
	// Under -race every exec'd bridge would sleep 1 s at exit.
	if os.Getenv("GORACE") == "" {
		env.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	return nil
}

// linuxCmds are script commands only Linux has (tty_linux_test.go).
var linuxCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){}

// scriptCmds are the extra script commands (TestScripts).
func scriptCmds() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	cmds := map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"exitcode":   cmdExitcode,
		"capture":    cmdCapture,
		"waitfile":   cmdWaitfile,
		"sleep":      cmdSleep,
		"eventually": cmdEventually,
		"jsonstyle":  cmdJSONStyle,
	}
	maps.Copy(cmds, linuxCmds)
	return cmds
}

func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N prog args...")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %v", err)
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with %d, want %d", args[1], got, want)
	}
}

func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: capture NAME FILE REGEXP")
	}
	re, err := regexp.Compile("(?m)" + args[2]) // multi-line, as in stdout and grep
	if err != nil {
		ts.Fatalf("capture: %v", err)
	}
	m := re.FindStringSubmatch(ts.ReadFile(args[1]))
	if len(m) < 2 {
		ts.Fatalf("capture: no match for %q in %s", args[2], args[1])
	}
	ts.Setenv(args[0], m[1])
}

func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile FILE")
	}
	p := ts.MkAbs(args[0])
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			return
		}
	}
	ts.Fatalf("waitfile: %s still missing or empty after 30s", args[0])
}

// cmdEventually runs a command until its standard output matches a
// pattern, for 30 s at most: `eventually REGEXP prog args...`, for what a
// daemon does on its next tick (a policy reload, a catalog publish).
func cmdEventually(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: eventually REGEXP prog args...")
	}
	re, err := regexp.Compile(args[0])
	ts.Check(err)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ts.Exec(args[1], args[2:]...)
		if re.MatchString(ts.ReadFile("stdout")) {
			return
		}
	}
	ts.Fatalf("eventually: the output of %s never matched %q in 30s; last:\n%s", args[1], args[0], ts.ReadFile("stdout"))
}

// cmdSleep pauses the script: `sleep DURATION`, for waiting out a key's
// overlap or a daemon's reload tick.
func cmdSleep(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sleep DURATION")
	}
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	time.Sleep(d)
}

// `bridge demo` runs a daemon and an agent in one process: run in process
// here, so that the race detector sees both sides' goroutines and the
// demo's log buffer between them (demo.txt, a script, runs without it).
func TestDemoInProcess(t *testing.T) {
	code, out, errOut := bridgeIn(t, "", "demo")
	if code != 0 || !strings.Contains(out, "== done: all four behaviours shown") || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
