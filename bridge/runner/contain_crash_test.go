//go:build linux

package runner

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The findings of issue 24, each in the containment mode of this test
// binary (cgroup v2 where it may write one) and again under the keepers
// (TestContainmentTreeTracking runs them with RUNNER_TEST_CONTAIN=tree).

// An op starts with descriptors 0, 1 and 2 only, even when the daemon
// holds one that a library opened without close-on-exec (notify's epoll
// instance and wake-up pipe).
func TestOnlyStandardDescriptors(t *testing.T) {
	t.Parallel()
	var leak [2]int
	if err := syscall.Pipe(leak[:]); err != nil { // pipe2(0): no close-on-exec
		t.Fatal(err)
	}
	defer syscall.Close(leak[0])
	defer syscall.Close(leak[1])
	// The shell's own descriptors, as ls finds them (not a Go helper: the
	// Go runtime opens files of its own at start).
	o := mustRun(t, shSpec(t, `ls /proc/$$/fd`))
	if fds := strings.Fields(string(o.Stdout.Data)); strings.Join(fds, " ") != "0 1 2" {
		t.Fatalf("the op started with descriptors %q, want 0 1 2 only (containment: %s)", o.Stdout.Data, containmentNow())
	}
}

// burnScript leaves a background process that does a fixed amount of work
// (200,000 rounds of sh arithmetic, about 0.2 s of CPU here), says so, and
// lives on; the program waits for the word, never for the process.
const burnScript = `(i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; touch burnt; exec sleep 600) </dev/null >/dev/null 2>&1 &
while [ ! -e burnt ]; do sleep 0.02; done`

// The CPU of a run is that of every process of it, not only of those the
// program waited for: a background burner that the program never waits for
// is charged.
func TestCPUCountsEveryProcess(t *testing.T) {
	t.Parallel()
	o := mustRun(t, shSpec(t, burnScript))
	if o.ExitCode != 0 {
		t.Fatalf("exit %d, stderr %q", o.ExitCode, o.Stderr.Data)
	}
	// Work, not time: a busy machine makes it slower, not cheaper.
	if o.CPU < 60*time.Millisecond {
		t.Fatalf("charged %v for a run whose background process did 0.2 s of work (containment: %s)", o.CPU, containmentNow())
	}
}

// A daemon killed outright leaves a run whose program started a process in
// a session of its own; once the next daemon of the same state has opened
// it, no process of that run lives.
func TestDaemonDeathEndsTheRun(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	daemon := exec.Command(exe)
	daemon.Dir = dir
	daemon.Env = append(os.Environ(), "RUNNER_TEST_HELPER=daemon", "RUNNER_TEST_STATE="+state,
		"RUNNER_TEST_SCRIPT=cd "+dir+` && setsid sh -c 'echo $$ > pid; exec sleep 1000' </dev/null >/dev/null 2>&1 & `+
			`cd `+dir+` && while [ ! -s pid ]; do sleep 0.01; done; echo "$(cat pid) $$"; exec sleep 1000`)
	out, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 {
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
		t.Fatalf("daemon printed %q (%v)", line, err)
	}
	escapee, _ := strconv.Atoi(f[0])
	leader, _ := strconv.Atoi(f[1])
	defer syscall.Kill(escapee, syscall.SIGKILL)
	_ = daemon.Process.Kill()
	_ = daemon.Wait()
	st, lo, err := OpenState(state, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !gone(escapee) || !gone(leader) {
		t.Fatalf("after OpenState (%+v), the run's leader gone %v, its escapee gone %v (containment: %s)",
			lo, gone(leader), gone(escapee), containmentNow())
	}
	if lo.Unended != "" {
		t.Errorf("Unended %q", lo.Unended)
	}
	t.Logf("leftovers: %+v", lo)
}

// Hostile programs: one that forks 10,000 processes and exits, and a fork
// bomb under a process limit. Each is contained, charged and ended. They
// load the machine: they run before the parallel tests, whose ladders are
// timed.
func TestForkTenThousand(t *testing.T) {
	// Subshells that block opening a FIFO: 10,000 processes for a second
	// of CPU (10,000 programs started would take ten).
	s, tag := taggedSpec(t, `mkfifo f; i=0; while [ $i -lt 10000 ]; do (read x <f) </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo forked`)
	s.Timeout = 5 * time.Minute
	o := mustRun(t, s)
	if o.ExitCode != 0 || string(o.Stdout.Data) != "forked\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q, notes %q", o.ExitCode, o.Stdout.Data, o.Stderr.Data, o.Notes)
	}
	checkNoneLeft(t, "10,000 forks", tag, o)
	if o.CPU <= 0 {
		t.Errorf("CPU %v", o.CPU)
	}
}

func TestForkBombUnderProcessLimit(t *testing.T) {
	uid := os.Getuid()
	script := `f() { f & f & sleep 600; }; f`
	s, tag := taggedSpec(t, script)
	if uid == 0 {
		// RLIMIT_NPROC does not bind root: the bomb runs as a user id of
		// its own (RLIMIT_NPROC counts every process of the user: nothing
		// else of the tests may run as it).
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root without setpriv: cannot bound a fork bomb")
		}
		uid = 65531
		s.Argv = append([]string{setpriv, "--reuid=65531", "--regid=65531", "--clear-groups"}, s.Argv...)
	}
	s.Limits = Limits{Processes: tasksOf(t, uid) + 40}
	s.Timeout = 2 * time.Second
	o := Run(context.Background(), s)
	if o.StartErr != nil || !o.TimedOut || !strings.Contains(string(o.Stderr.Data), "fork") {
		t.Fatalf("StartErr %v, TimedOut %v, stderr %.200q", o.StartErr, o.TimedOut, o.Stderr.Data)
	}
	checkNoneLeft(t, "fork bomb", tag, o)
}
