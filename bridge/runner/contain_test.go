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
	// An orphan that joins the daemon's process group, to be taken for
	// one of the daemon's own children (tracking).
	{"into the daemon's process group", `(BRIDGE_TEST_PGID=$BRIDGE_TEST_DAEMON_PGID ` + setpgidHelper + ` &); ` + awaitPid},
	// A process that moves itself into the daemon's cgroup, out of the
	// run's: the op's user can always write the daemon's cgroup.procs.
	{"into the daemon's cgroup", `setsid sh -c 'echo $$ > "$BRIDGE_TEST_DAEMON_CGROUP/cgroup.procs"; echo $$ > pid; exec sleep 60' </dev/null >/dev/null 2>&1 & ` + awaitPid},
	// A process whose main thread exits while another lives on: its
	// leader is a zombie, which a look at the leader alone takes for dead.
	{"zombie leader", `(RUNNER_TEST_HELPER=zombieleader "$BRIDGE_TEST_EXE" </dev/null >/dev/null 2>&1 &); ` + awaitPid},
}

// setpgidHelper starts the test binary as an op's program that joins
// process group BRIDGE_TEST_PGID, if it may (TestMain).
const setpgidHelper = `RUNNER_TEST_HELPER=setpgid "$BRIDGE_TEST_EXE" </dev/null >/dev/null 2>&1`

const awaitPid = `while [ ! -s pid ]; do sleep 0.01; done; echo ready`

var tagSeq atomic.Int64

// taggedSpec runs script with a tag in its environment, which every process
// of the op inherits (sleep included): tagged finds them in /proc.
func taggedSpec(t *testing.T, script string) (Spec, string) {
	t.Helper()
	tag := fmt.Sprintf("BRIDGE_TEST_TAG=%d-%d-%d", os.Getpid(), time.Now().UnixNano(), tagSeq.Add(1))
	s := shSpec(t, script)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cg, _, err := cgroupOf("self")
	if err != nil {
		cg = "/nonexistent"
	}
	s.Env = append(s.Env, tag, "BRIDGE_TEST_EXE="+exe, "BRIDGE_TEST_DAEMON_CGROUP="+cg,
		fmt.Sprintf("BRIDGE_TEST_DAEMON_PGID=%d", syscall.Getpgrp()))
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
			// The escape must happen before the timeout, or the test
			// proves nothing; on a loaded machine it once took more than
			// a second (CI, session 16), so a run too short is run again
			// with twice the time.
			for timeout := time.Second; ; timeout *= 2 {
				s, tag := taggedSpec(t, e.script+"; sleep 60")
				s.Timeout = timeout
				start := time.Now()
				o := mustRun(t, s)
				if !strings.Contains(string(o.Stdout.Data), "ready") && timeout < 8*time.Second {
					checkNoneLeft(t, e.name, tag, o)
					t.Logf("the escape did not happen within %v; again with twice the time", timeout)
					continue
				}
				if !o.TimedOut || !strings.Contains(string(o.Stdout.Data), "ready") {
					t.Fatalf("TimedOut %v, stdout %q: the escape did not happen before the timeout", o.TimedOut, o.Stdout.Data)
				}
				checkNoneLeft(t, e.name, tag, o)
				if d := time.Since(start); d > timeout+7*time.Second {
					t.Errorf("Run took %v with a timeout of %v", d, timeout)
				}
				break
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

// An orphan of op A that joins op B's process group dies at the end of A,
// not of B: each op has a session of its own, and setpgid cannot join a
// group of another session.
func TestEscapeIntoAnotherOpsGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := shSpec(t, `echo $$ > pgid; exec sleep 60`)
	done := make(chan *Outcome, 1)
	go func() { done <- Run(ctx, b) }()
	defer func() { cancel(); <-done }()
	var pgid int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		data, _ := os.ReadFile(filepath.Join(b.Dir, "pgid"))
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			pgid = n
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("op B did not start")
		}
	}
	a, tag := taggedSpec(t, fmt.Sprintf(`(BRIDGE_TEST_PGID=%d %s &); %s`, pgid, setpgidHelper, awaitPid))
	o := mustRun(t, a)
	if o.ExitCode != 0 || string(o.Stdout.Data) != "ready\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", o.ExitCode, o.Stdout.Data, o.Stderr.Data)
	}
	checkNoneLeft(t, "A's orphan in B's group", tag, o)
	select {
	case <-done:
		t.Fatal("op B ended with op A")
	default:
	}
}

// An op that makes a cgroup inside its run's cgroup and moves into it
// leaves no cgroup behind.
func TestCgroupNestedRemoved(t *testing.T) {
	t.Parallel()
	if c := containmentNow(); !strings.HasPrefix(c, "cgroup v2") {
		t.Skipf("containment: %s", c)
	}
	s, tag := taggedSpec(t, `D="$BRIDGE_TEST_DAEMON_CGROUP/$(basename "$(sed -n 's/^0:://p' /proc/self/cgroup)")"
mkdir "$D/nest" || exit 9
setsid sh -c 'echo $$ > "$1/nest/cgroup.procs"; echo $$ > pid; exec sleep 60' sh "$D" </dev/null >/dev/null 2>&1 &
`+awaitPid+` >/dev/null; echo "$D"`)
	o := mustRun(t, s)
	dir := strings.TrimSpace(string(o.Stdout.Data))
	if o.ExitCode != 0 || !strings.Contains(dir, cgroupPrefix) {
		t.Fatalf("exit %d, stdout %q, stderr %q", o.ExitCode, o.Stdout.Data, o.Stderr.Data)
	}
	checkNoneLeft(t, "nested cgroup", tag, o)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the run's cgroup %s is left (%v); notes %q", dir, err, o.Notes)
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
	cmd := exec.Command(exe, "-test.run", "^(TestEscape.*|TestContainedNormalOp|TestContainmentTreeTracking|TestOnlyStandardDescriptors|TestCPUCountsEveryProcess|TestDaemonDeathEndsTheRun|TestDaemonDeathKillsChild|TestForkThousands|TestForkBombUnderProcessLimit|TestLimitProcessesStopsForkLoop|TestStoppedKeeperDoesNotHangTheRun|TestLateKeeperIsWaitedFor|TestTracedLeaderDoesNotHangTheRun|TestExitHeldByTracerDoesNotHangTheRun|TestKilledKeeperRunIsSwept|TestOrphansReapedMidRun|TestStateIDFollowsTheDirectory|TestStateIDOfACopyIsItsOwn|TestKeeperServesRunAfterRun|TestStoppedKeeperAtStartIsNotAFailedStart|TestKilledPooledKeeperChargesItsRunOnly|TestChangedKeeperIsNotReused|TestChainIsSweptWhole|TestCloneParentSiblingIsSwept|TestLeaderForgottenOnlyByItsRun|TestBackgroundGrandchildKilled|TestEscapedGrandchildDoesNotHangRun|TestKillAll|TestKillAllRightAfterCancelIsCancelled|TestKillAllDuringLaunchKillsAtRegistration|TestCancel|TestTimeout)$", "-test.count=1", "-test.v",
		// The tests mostly wait (the escape timeouts take a second each):
		// run more of them at once than there are CPUs.
		"-test.parallel=8")
	cmd.Env = append(os.Environ(), "RUNNER_TEST_CONTAIN=tree")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("containment: process tree tracking")) {
		t.Fatalf("under process tree tracking: %v\n%s", err, out)
	}
}
