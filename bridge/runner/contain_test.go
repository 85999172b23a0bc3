//go:build linux

package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The escapes of issue 13: a program that leaves its process group (setsid)
// or double-forks into a new session, so that a kill of the group misses it.
// Each escapee writes its pid only once it runs in its own session, and the
// script says "ready" only then: the escape has happened before the test
// cancels, or before the timeout, so the old group-only runner fails them.
var escapes = []struct{ name, script string }{
	{"setsid", `setsid sh -c 'echo $$ > pid; exec sleep 60' & ` + awaitPid},
	{"setsid without pipes", `setsid sh -c 'echo $$ > pid; exec sleep 60' </dev/null >/dev/null 2>&1 & ` + awaitPid},
	{"double fork", `(setsid sh -c 'echo $$ > pid; exec sleep 60' &); ` + awaitPid},
	{"double fork without pipes", `(setsid sh -c 'echo $$ > pid; exec sleep 60' </dev/null >/dev/null 2>&1 &); ` + awaitPid},
}

const awaitPid = `while [ ! -s pid ]; do sleep 0.01; done; echo ready`

var tagSeq atomic.Int64

// taggedSpec runs script with a tag in its environment, which every process
// of the op inherits (sleep included): tagged finds them in /proc.
func taggedSpec(t *testing.T, script string) (Spec, string) {
	t.Helper()
	tag := fmt.Sprintf("BRIDGE_TEST_TAG=%d-%d-%d", os.Getpid(), time.Now().UnixNano(), tagSeq.Add(1))
	s := shSpec(t, script)
	s.Env = append(s.Env, tag)
	t.Cleanup(func() {
		for _, pid := range tagged(tag) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return s, tag
}

// tagged lists the live processes (not zombies) whose environment holds tag.
func tagged(tag string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), []byte(tag+"\x00")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err == nil && !gone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func checkNoneLeft(t *testing.T, name, tag string, o *Outcome) {
	t.Helper()
	if left := tagged(tag); len(left) > 0 {
		t.Errorf("%s: processes %v of the op outlived its result (containment: %s); notes %q", name, left, containmentNow(), o.Notes)
	}
}

func TestEscapeTimeout(t *testing.T) {
	t.Parallel()
	for _, e := range escapes {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			s, tag := taggedSpec(t, e.script+"; sleep 60")
			s.Timeout = time.Second
			start := time.Now()
			o := mustRun(t, s)
			if !o.TimedOut || !strings.Contains(string(o.Stdout.Data), "ready") {
				t.Fatalf("TimedOut %v, stdout %q: the escape did not happen before the timeout", o.TimedOut, o.Stdout.Data)
			}
			checkNoneLeft(t, e.name, tag, o)
			if d := time.Since(start); d > 8*time.Second {
				t.Errorf("Run took %v", d)
			}
		})
	}
}

func TestEscapeCancel(t *testing.T) {
	t.Parallel()
	for _, e := range escapes {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, tag := taggedSpec(t, e.script+"; sleep 60")
			var once sync.Once
			s.OnOutput = func(_ int, p []byte) {
				if bytes.Contains(p, []byte("ready")) {
					once.Do(cancel)
				}
			}
			o := Run(ctx, s)
			if o.StartErr != nil || !o.Cancelled {
				t.Fatalf("StartErr %v, Cancelled %v, stdout %q", o.StartErr, o.Cancelled, o.Stdout.Data)
			}
			checkNoneLeft(t, e.name, tag, o)
		})
	}
}

// The program ends on its own, leaving its escapee behind.
func TestEscapeNormalEnd(t *testing.T) {
	t.Parallel()
	for _, e := range escapes {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			s, tag := taggedSpec(t, e.script)
			o := mustRun(t, s)
			if o.ExitCode != 0 || o.TimedOut || string(o.Stdout.Data) != "ready\n" {
				t.Fatalf("exit %d, TimedOut %v, stdout %q", o.ExitCode, o.TimedOut, o.Stdout.Data)
			}
			checkNoneLeft(t, e.name, tag, o)
		})
	}
}

// KillAll (a daemon's second signal) reaches the escapees too.
func TestEscapeKillAll(t *testing.T) {
	s, tag := taggedSpec(t, escapes[0].script+"; sleep 60")
	s.Grace = 10 * time.Second
	started := make(chan struct{})
	var once sync.Once
	s.OnOutput = func(_ int, p []byte) {
		if bytes.Contains(p, []byte("ready")) {
			once.Do(func() { close(started) })
		}
	}
	done := make(chan *Outcome, 1)
	go func() { done <- Run(context.Background(), s) }()
	<-started
	KillAll()
	select {
	case o := <-done:
		checkNoneLeft(t, "KillAll", tag, o)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after KillAll")
	}
}

// A well-behaved op is unaffected: its status and output, no notes, and no
// wait for the grace period.
func TestContainedNormalOp(t *testing.T) {
	t.Parallel()
	s, tag := taggedSpec(t, "echo out; echo err >&2; exit 3")
	s.Grace = 5 * time.Second
	start := time.Now()
	o := mustRun(t, s)
	if o.ExitCode != 3 || string(o.Stdout.Data) != "out\n" || string(o.Stderr.Data) != "err\n" || len(o.Notes) != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q, notes %q", o.ExitCode, o.Stdout.Data, o.Stderr.Data, o.Notes)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a program that ends at once took %v", d)
	}
	checkNoneLeft(t, "normal op", tag, o)
	t.Logf("containment: %s", containmentNow())
}

// TestContainmentTreeTracking runs the escape tests again in a test binary
// forced to track the process tree, the fallback where no cgroup can be
// written (as in many CI containers). Where no cgroup can be written the
// tests above already ran that way.
func TestContainmentTreeTracking(t *testing.T) {
	t.Parallel()
	if os.Getenv("RUNNER_TEST_CONTAIN") == "tree" {
		if c := containmentNow(); !strings.HasPrefix(c, "process tree tracking") {
			t.Fatalf("containment %q, want process tree tracking", c)
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^(TestEscape.*|TestContainedNormalOp|TestContainmentTreeTracking|TestBackgroundGrandchildKilled|TestEscapedGrandchildDoesNotHangRun|TestKillAll|TestCancel|TestTimeout)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "RUNNER_TEST_CONTAIN=tree")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("containment: process tree tracking")) {
		t.Fatalf("under process tree tracking: %v\n%s", err, out)
	}
}
