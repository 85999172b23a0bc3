//go:build unix

package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// A child process runs lifecycles and is SIGKILLed at a random point, three
// times on the same ledger. Every state the child reported after Transition
// returned must be on disk (ledger before effect); every entry must be in a
// state its history explains; nothing ran twice.
func TestCrashChild(t *testing.T) {
	dir := t.TempDir()
	reported := map[string]State{} // key → furthest state the child reported
	for round := range 3 {
		// Moves to the archive every few entries, so that kills land
		// inside them too (between the archive's fsync and buntdb's).
		cmd, out := startChild(t, "crash", dir, "LEDGER_START="+strconv.Itoa(round*1_000_000), "LEDGER_ARCHIVE_EVERY=4")
		killAfter := 20 + rand.IntN(300)
		lines := 0
		for out.Scan() {
			f := strings.Fields(out.Text())
			if len(f) != 2 || f[0] == "error" {
				t.Fatalf("child: %q", out.Text())
			}
			s, key := State(f[0]), f[1]
			if rank(s) <= rank(reported[key]) && reported[key] != "" {
				t.Fatalf("child reported %s after %s for %s", s, reported[key], key)
			}
			reported[key] = s
			lines++
			if lines == killAfter {
				// Lines already in the pipe still count: each was
				// printed after its Transition returned.
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := cmd.Wait(); err == nil {
			t.Fatal("child exited normally")
		}
		if lines < killAfter {
			t.Fatalf("child died after %d lines, before the kill", lines)
		}

		l := mustOpen(t, dir)
		all, err := l.List(nil)
		if err != nil {
			t.Fatal(err)
		}
		onDisk := map[string]Entry{}
		for i, e := range all {
			if i > 0 && all[i-1].Key >= e.Key {
				t.Errorf("%s listed after %s (twice, or out of order)", e.Key, all[i-1].Key)
			}
			onDisk[e.Key] = e
			r := rank(e.State)
			if r < 0 {
				t.Errorf("%s: state %s outside the child's lifecycle", e.Key, e.State)
				continue
			}
			if len(e.History) != r+1 {
				t.Errorf("%s: history %v does not lead to %s", e.Key, e.History, e.State)
			}
			for i, h := range e.History {
				if h.State != lifecycle[i] {
					t.Errorf("%s: history %v", e.Key, e.History)
				}
			}
			wantRuns := 0
			if r >= rank(StateRunning) {
				wantRuns = 1
			}
			if e.Runs != wantRuns {
				t.Errorf("%s: %d runs in state %s", e.Key, e.Runs, e.State)
			}
		}
		for key, s := range reported {
			e, ok := onDisk[key]
			if !ok {
				t.Errorf("round %d: %s reported %s but is missing", round, key, s)
				continue
			}
			if rank(e.State) < rank(s) {
				t.Errorf("round %d: %s reported %s but on disk is %s", round, key, s, e.State)
			}
		}
		mustClose(t, l)
	}
	if len(reported) < 3*5 {
		t.Fatalf("only %d keys reported", len(reported))
	}
	l := mustOpen(t, dir)
	defer mustClose(t, l)
	if st, err := l.Stats(); err != nil || st.Archived == 0 {
		t.Fatalf("nothing archived after three rounds: %+v, %v", st, err)
	}
}

// The lock holds against a second Open in the same process and from
// another process, names the holder's pid, and dies with the holder.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)

	var le *Error
	_, err := Open(dir)
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.PID != os.Getpid() || le.Hint == "" {
		t.Fatalf("second Open in process: %v (%+v)", err, le)
	}
	if _, err := Repair(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Repair while open: %v", err)
	}
	cmd, out := startChild(t, "try", dir)
	if !out.Scan() || out.Text() != fmt.Sprint("locked ", os.Getpid()) {
		t.Fatalf("child Open while the parent holds the lock: %q", out.Text())
	}
	_ = cmd.Wait()
	mustClose(t, l)

	cmd, out = startChild(t, "hold", dir)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("holder: %q", out.Text())
	}
	_, err = Open(dir)
	if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.PID != cmd.Process.Pid {
		t.Fatalf("Open while a child holds the lock: %v, want ErrLocked with pid %d", err, cmd.Process.Pid)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("error does not name the holder: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	l = mustOpen(t, dir)
	mustClose(t, l)
}

func rank(s State) int {
	for i, v := range lifecycle {
		if v == s {
			return i
		}
	}
	return -1
}

// startChild runs the test binary in a child mode with its stdout piped.
func startChild(t *testing.T, mode, dir string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"LEDGER_CHILD=" + mode, "LEDGER_DIR=" + dir}, env...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}
