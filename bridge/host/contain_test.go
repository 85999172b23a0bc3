package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/runner"
)

// The containment of an op's processes, as the daemon uses it (issue 24),
// in both modes: a cgroup v2 where the daemon may write one (root here),
// and the keepers where it may not (the daemon run as nobody).

// bothModes runs body once in each containment mode: "cgroup" in this
// process where its cgroup is writable, "keeper" in a copy of the test
// binary run as the unprivileged user nobody (from root), or here when this
// process is not root and has no writable cgroup. A mode this machine
// cannot give is skipped, unless BRIDGE_REQUIRE_CONTAINMENT=1 (CI).
func bothModes(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("containment modes are Linux's")
	}
	top := t.Name()
	t.Run("cgroup", func(t *testing.T) {
		if os.Getenv(unprivEnv) != "" {
			t.Skip("the cgroup mode runs in the privileged test process")
		}
		if c := runner.Containment(0); !strings.HasPrefix(c, "cgroup") {
			skipOrRequire(t, "no writable cgroup v2 here: "+c)
		}
		body(t)
	})
	t.Run("keeper", func(t *testing.T) {
		if os.Getuid() != 0 {
			if c := runner.Containment(0); !strings.HasPrefix(c, "process tree") {
				skipOrRequire(t, "this unprivileged process has a writable cgroup: "+c)
			}
			body(t)
			return
		}
		runUnprivileged(t, "^"+top+"$/^keeper$")
	})
}

// unprivEnv marks a test binary that runUnprivileged started.
const unprivEnv = "BRIDGE_TEST_UNPRIVILEGED"

func skipOrRequire(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("BRIDGE_REQUIRE_CONTAINMENT") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// runUnprivileged runs the tests matching pattern in a copy of this test
// binary (a go test binary sits in a directory only its builder may read)
// as nobody, and fails with its output if they fail or do not run.
func runUnprivileged(t *testing.T, pattern string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "bridge-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "host.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	// Written under the fork lock: a process another test forks while the
	// copy is open for writing holds it until its exec, and the copy's own
	// exec then fails with "text file busy" (CI, session 16).
	syscall.ForkLock.RLock()
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		err = errors.Join(err, dst.Close())
	}
	syscall.ForkLock.RUnlock()
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run="+pattern, "-test.count=1", "-test.v", "-test.timeout=5m")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), unprivEnv+"=1", "HOME="+dir, "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	t.Logf("as nobody:\n%s", out)
}

// containPolicy's ops leave a process behind their program, as make's
// shells or a deploy script do. Each child appends its pid to
// COUNT_FILE.<id>.children, then its effect ("end-<id>") to COUNT_FILE 1.5 s
// after the op started, while the program itself runs for 2 s and then
// waits for it: a clean run's effect lands (a loaded machine that started
// the child half a second late had the run's end kill it before), and a
// crash, which comes once the child noted its pid, finds both at work as
// before.
const containPolicy = `
[ops.bgonce]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; sh -c 'echo $$ >> \"$COUNT_FILE.$1.children\"; sleep 1.5; echo end-$1 >> \"$COUNT_FILE\"' child \"$1\" </dev/null >/dev/null 2>&1 & sleep 2; wait; echo out-$1", "bgonce", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

# The same, with a reconcile command that looks for the effect.
[ops.bgchecked]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; sh -c 'echo $$ >> \"$COUNT_FILE.$1.children\"; sleep 1.5; echo end-$1 >> \"$COUNT_FILE\"' child \"$1\" </dev/null >/dev/null 2>&1 & sleep 2; wait; echo out-$1", "bgchecked", "{request_id}"]
reconcile = ["sh", "-c", "if grep -qx end-$1 \"$COUNT_FILE\"; then echo seen-$1; exit 0; fi; exit 3", "bgchecked", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

# A program that leaves behind it a process that does a fixed amount of
# work (300,000 rounds of sh arithmetic, about 0.3 s of CPU here, less than
# the ceiling's RLIMIT_CPU of 1 s a process), says so and lives on; the
# program waits for the word, never for the process.
[ops.burn]
argv = ["sh", "-c", "(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; touch \"$COUNT_FILE.burnt\"; exec sleep 600) </dev/null >/dev/null 2>&1 & while [ ! -e \"$COUNT_FILE.burnt\" ]; do sleep 0.02; done; rm \"$COUNT_FILE.burnt\""]
env = ["PATH", "COUNT_FILE"]

# The program's own descriptors.
[ops.fds]
argv = ["sh", "-c", "ls /proc/$$/fd"]
env = ["PATH"]

[agents.cloud-1]
ops = ["bgonce", "bgchecked", "burn", "fds"]
max_cpu_seconds_per_day = 1
`

// TestCrashWithChildrenOutlivingTheLeader kills a real daemon process while
// an op runs whose child outlives its program (findings 1 and 2 of issue
// 24), restarts a daemon, and checks: when the answer comes, no process of
// the interrupted run lives; its effect never lands; with a reconcile
// command that looks for the effect the op runs once more and the effect
// happens once, without one it is answered uncertain with no effect.
func TestCrashWithChildrenOutlivingTheLeader(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T) {
		p := newPair(t, containPolicy)
		countFile := filepath.Join(t.TempDir(), "count")
		for _, tc := range []struct {
			op                  string
			status, reason      string
			starts, ends, runs2 int
		}{
			{"bgchecked", bridge.StatusDone, "", 2, 1, 2},
			{"bgonce", bridge.StatusUncertain, "crashed", 1, 0, 1},
		} {
			t.Run(tc.op, func(t *testing.T) {
				s, err := p.client.Submit(agent.SubmitOptions{Op: tc.op})
				if err != nil {
					t.Fatal(err)
				}
				// The daemon is killed outright once the op's child is at
				// work (its pid noted), not at a fixed time after the start.
				c := startCrashProc(t, p, "", countFile)
				c.WaitReady(t)
				testkit.WaitFor(t, 20*time.Second, "the op's child to start", func() bool { return len(testkit.OpChildren(t, countFile, s.ID)) > 0 })
				c.Cmd.Process.Kill()
				<-c.Done
				crashed := testkit.OpChildren(t, countFile, s.ID)
				if len(crashed) != 1 {
					t.Fatalf("the interrupted run's child recorded %v:\n%s", crashed, c.LogText())
				}
				testkit.WaitLockFree(t, p.host)
				p.start(t, map[string]string{"COUNT_FILE": countFile})
				out := p.wait(t, s.ID)
				// The answer is in: the interrupted run's child must be gone
				// now, or its effect could still land after it.
				if testkit.Alive(crashed[0]) {
					syscall.Kill(crashed[0], syscall.SIGKILL)
					t.Fatalf("answered %s while the interrupted run's child %d lived (containment: %s)",
						out.Receipt.Status, crashed[0], runner.Containment(0))
				}
				p.stop(t)
				if out.Receipt.Status != tc.status || string(out.Receipt.Reason) != tc.reason {
					t.Errorf("answered %s (%s: %s), want %s (%s)", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail, tc.status, tc.reason)
				}
				starts, ends := testkit.Count(t, countFile, "start-"+s.ID), testkit.Count(t, countFile, "end-"+s.ID)
				if starts != tc.starts || ends != tc.ends {
					t.Errorf("started %d times, the effect landed %d times; want %d and %d", starts, ends, tc.starts, tc.ends)
				}
				if e := p.entry(t, s.ID); e.Runs != tc.runs2 {
					t.Errorf("ledger runs %d, want %d", e.Runs, tc.runs2)
				}
			})
		}
	})
}

// TestCPUCeilingChargesEveryProcess: an op whose background process burns
// CPU its program never waits for is charged that CPU (finding 3), so the
// agent's daily ceiling refuses the next request.
func TestCPUCeilingChargesEveryProcess(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T) {
		p := newPair(t, containPolicy)
		p.start(t, map[string]string{"COUNT_FILE": filepath.Join(t.TempDir(), "count")})
		// Each burn does about 0.3 CPU-seconds of work: the ceiling of 1 a
		// day refuses a run within eight, even on a machine twice as fast.
		for i := range 8 {
			out := p.run(t, agent.SubmitOptions{Op: "burn"})
			if out.Receipt.Status == bridge.StatusRejected && strings.Contains(out.Receipt.Detail, "CPU") {
				if i == 0 {
					t.Fatalf("the first run refused: %s", out.Receipt.Detail)
				}
				return
			}
			if out.Receipt.Status != bridge.StatusDone || out.Receipt.ExitCode != 0 {
				t.Fatalf("burn: %s exit %d (%s)", out.Receipt.Status, out.Receipt.ExitCode, out.Receipt.Detail)
			}
		}
		t.Fatal("eight runs that each left a burner doing 0.3 s of work were never refused by a ceiling of 1 CPU-second a day")
	})
}

// TestOpInheritsNoDescriptor: with the daemon's watcher running (notify's
// epoll instance and wake-up pipe open), an op starts with descriptors 0, 1
// and 2 only (finding 4).
func TestOpInheritsNoDescriptor(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T) {
		p := newPair(t, containPolicy)
		p.start(t, nil)
		out := p.run(t, agent.SubmitOptions{Op: "fds"})
		if fds := strings.Fields(string(out.Stdout)); out.Receipt.ExitCode != 0 || strings.Join(fds, " ") != "0 1 2" {
			t.Fatalf("the op started with descriptors %q (exit %d), want 0 1 2", out.Stdout, out.Receipt.ExitCode)
		}
	})
}

// TestLingeringRunHoldsRequestUncertain: when a process of a run the last
// daemon left may still live (a keeper still holds the runs' lock after the
// wait), an interrupted op is answered uncertain, idempotent or not: it is
// neither run again nor checked while it may still have its effect.
func TestLingeringRunHoldsRequestUncertain(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("containment records are Linux's")
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) to stand for a lingering keeper")
	}
	const policy = `
[ops.again]
argv = ["sh", "-c", "echo start-$1 >> \"$COUNT_FILE\"; echo started; sleep 2; echo end-$1 >> \"$COUNT_FILE\"", "again", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
idempotent = true

[agents.cloud-1]
ops = ["again"]
`
	p := newPair(t, policy)
	countFile := filepath.Join(t.TempDir(), "count")
	s, err := p.client.Submit(agent.SubmitOptions{Op: "again"})
	if err != nil {
		t.Fatal(err)
	}
	c := startCrashProc(t, p, "mid-run", countFile)
	c.WaitCrash(t, "mid-run")
	// A keeper that never ends its run: it holds the runs' lock shared.
	// It says so once it holds it: a look at the lock alone could find it
	// held by the crashed run's own keeper, on its way out (a flake).
	holder := exec.Command(flock, "--shared", p.host.Path("run", "keepers.lock"), "sh", "-c", "echo held; exec sleep 60")
	held, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	if line, err := bufio.NewReader(held).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the stand-in keeper: %q, %v", line, err)
	}
	testkit.WaitLockFree(t, p.host)
	var logs testkit.LockedBuffer
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Rescan: 500 * time.Millisecond, Grace: 200 * time.Millisecond,
		Env: envWith(map[string]string{"COUNT_FILE": countFile}), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	d.runsWait = 300 * time.Millisecond
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.daemon, p.cancel, p.done = d, cancel, make(chan error, 1)
	go func() { p.done <- d.Run(ctx) }()
	t.Cleanup(func() { p.stop(t) })
	out := p.wait(t, s.ID)
	p.stop(t)
	if out.Receipt.Status != bridge.StatusUncertain || !strings.Contains(out.Receipt.Detail, "may still be running") {
		counts, _ := os.ReadFile(countFile)
		t.Fatalf("answered %s (%s: %s), want uncertain: a process of the run may still be running\nthe count file:\n%s\nthe crashed daemon's log:\n%s\nthe next daemon's log:\n%s",
			out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail, counts, c.LogText(), logs.String())
	}
	if starts := testkit.Count(t, countFile, "start-"+s.ID); starts != 1 {
		t.Errorf("the op started %d times, want once", starts)
	}
}

// containHostilePolicy's ops are bad input from an allowed agent: a program that
// forks 2,000 processes and exits (the runner's TestForkThousands takes
// 4,000: a fork costs 3 ms and more on the CI's machines), a fork bomb under a process limit, and
// one that closes its standard streams and daemonizes. Every process carries
// TAG in its environment.
const containHostilePolicy = `
[ops.forks]
argv = ["sh", "-c", "mkfifo \"$COUNT_FILE.fifo\"; i=0; while [ $i -lt 2000 ]; do (read x <\"$COUNT_FILE.fifo\") </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo forked"]
env = ["PATH", "COUNT_FILE", "TAG"]
timeout = "5m"

[ops.bomb]
argv = ["sh", "-c", "f() {{ f & f & sleep 600; }}; f"]
env = ["PATH", "TAG"]
timeout = "3s"
processes = 500

[ops.daemonize]
argv = ["sh", "-c", "setsid sh -c 'exec sleep 600' </dev/null >/dev/null 2>&1 & exec >&- 2>&-; exit 0"]
env = ["PATH", "TAG"]

[ops.echo]
argv = ["echo", "still serving"]
env = ["PATH"]

[agents.cloud-1]
ops = ["forks", "bomb", "daemonize", "echo"]
`

// TestHostileOpsContained: each hostile op is answered, none of its
// processes outlives the answer, and the daemon serves the next request.
func TestHostileOpsContained(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T) {
		p := newPair(t, containHostilePolicy)
		tag := fmt.Sprintf("bridge-hostile-%d-%d", os.Getpid(), time.Now().UnixNano())
		p.start(t, map[string]string{"COUNT_FILE": filepath.Join(t.TempDir(), "count"), "TAG": tag})
		ops := []string{"forks", "daemonize"}
		if os.Getuid() != 0 {
			ops = append(ops, "bomb") // RLIMIT_NPROC does not bind root
		}
		for _, op := range ops {
			// A wait as long as the op's timeout: thousands of forks take
			// a loaded machine far longer than p.run's 20 s.
			s, err := p.client.Submit(agent.SubmitOptions{Op: op})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			out, err := p.client.Wait(ctx, s.ID, nil)
			cancel()
			if err != nil {
				t.Fatalf("%s: wait %s: %v", op, s.ID, err)
			}
			if out.Receipt.Status != bridge.StatusDone {
				t.Errorf("%s: %s (%s: %s)", op, out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
			}
			if left := taggedProcs(tag); len(left) > 0 {
				t.Fatalf("%s: %d of its processes outlived its answer (containment: %s)", op, len(left), runner.Containment(0))
			}
		}
		if out := p.run(t, agent.SubmitOptions{Op: "echo"}); string(out.Stdout) != "still serving\n" {
			t.Fatalf("after the hostile ops: %s %q", out.Receipt.Status, out.Stdout)
		}
	})
}

// taggedProcs lists the live processes whose environment holds TAG=tag.
func taggedProcs(tag string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), []byte("TAG="+tag+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && testkit.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
