//go:build linux

package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func liveCount() int {
	live.mu.Lock()
	defer live.mu.Unlock()
	return len(live.m)
}

// A daemon's second signal cancels its runs, then kills them at once
// (KillAll). A run must read that end as cancelled, never as an exit of its
// own: the daemon would answer it done. The kill landing while the run had
// not reached its wait yet (a shim's status read, with limits) made it an
// exit of its own in 2 of 300 tries (red team of 89cc37a); each try here
// cancels and kills the moment the program is registered.
func TestKillAllRightAfterCancelIsCancelled(t *testing.T) {
	for i := 0; i < 300; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan *Outcome, 1)
		go func() {
			ch <- Run(ctx, Spec{Argv: []string{"/bin/sleep", "10"}, Env: []string{testPath}, Dir: "/",
				Limits: Limits{OpenFiles: 64}, Grace: 5 * time.Second})
		}()
		// A run that ends without registering (a start given up on) must
		// fail the test, not spin it forever (CI, session 16).
		for liveCount() == 0 && len(ch) == 0 {
			time.Sleep(10 * time.Microsecond)
		}
		if len(ch) > 0 {
			o := <-ch
			t.Fatalf("try %d: the run ended before its program was registered: %v", i, o.StartErr)
		}
		cancel()
		KillAll()
		o := <-ch
		if o.StartErr == nil && !o.Cancelled {
			t.Fatalf("try %d: a run cancelled and then killed reads as its own end (signal %q, exit %d)", i, o.Signal, o.ExitCode)
		}
		// Killed before its shim said "R" (the common case under the race
		// detector): not started, because of the cancel, never a binary
		// without runner.Main (red team of 38665c6: 200 of 200 tries).
		if o.StartErr != nil && (!o.Cancelled || !strings.HasPrefix(o.StartErr.Error(), "not started: ")) {
			t.Fatalf("try %d: a shim killed by the second signal reads cancelled %v, %v", i, o.Cancelled, o.StartErr)
		}
	}
}

// A cancel and a KillAll at a random moment of a run's start, with and
// without the shim: the run ends at once (its program ignores SIGINT and
// SIGTERM, with a minute of grace), a run said not to have started left no
// trace of its program, and one that ran reads as cancelled (red team of
// 38665c6, which ran it 400 and 150 times, and under the keepers).
func TestAbortAtAnyMomentOfTheStart(t *testing.T) {
	dir := t.TempDir()
	for _, lim := range []Limits{{}, {OpenFiles: 64}} {
		for i := range 60 {
			marker := filepath.Join(dir, fmt.Sprintf("m%d-%d", lim.OpenFiles, i))
			ctx, cancel := context.WithCancel(context.Background())
			ch := make(chan *Outcome, 1)
			go func() {
				ch <- Run(ctx, Spec{Argv: []string{"/bin/sh", "-c", "trap '' INT TERM; : > " + marker + "; exec sleep 30"},
					Env: []string{testPath}, Dir: "/", Limits: lim, Grace: time.Minute})
			}()
			time.Sleep(time.Duration(rand.Int64N(int64(4 * time.Millisecond))))
			cancel()
			KillAll()
			var o *Outcome
			select {
			case o = <-ch:
			case <-time.After(20 * time.Second):
				t.Fatalf("limits %v, try %d: the run goes on 20 s after its cancel and KillAll", lim, i)
			}
			_, err := os.Stat(marker)
			switch {
			case o.StartErr != nil && err == nil && !errors.Is(o.StartErr, ErrMayHaveStarted):
				t.Fatalf("limits %v, try %d: the program ran, yet %v", lim, i, o.StartErr)
			case o.StartErr != nil && !o.Started.IsZero():
				t.Fatalf("limits %v, try %d: %v with a start time", lim, i, o.StartErr)
			case o.StartErr == nil && !o.Cancelled:
				t.Fatalf("limits %v, try %d: read as its own end (signal %q, exit %d)", lim, i, o.Signal, o.ExitCode)
			}
		}
	}
}

// A plain cancel at any moment of the start, with no KillAll: the program
// gets the ladder's SIGINT (it exits 7 on it), never a SIGKILL at once.
func TestPlainCancelAtAnyMomentGetsTheLadder(t *testing.T) {
	for _, lim := range []Limits{{}, {OpenFiles: 64}} {
		for i := range 60 {
			ctx, cancel := context.WithCancel(context.Background())
			ch := make(chan *Outcome, 1)
			go func() {
				ch <- Run(ctx, Spec{Argv: []string{"/bin/sh", "-c", "trap 'exit 7' INT; while :; do sleep 0.01; done"},
					Env: []string{testPath}, Dir: "/", Limits: lim, Grace: 10 * time.Second})
			}()
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			cancel()
			if o := <-ch; o.StartErr == nil && (o.Signal == "SIGKILL" || !o.Cancelled) {
				t.Fatalf("limits %v, try %d: a plain cancel: signal %q, exit %d, cancelled %v", lim, i, o.Signal, o.ExitCode, o.Cancelled)
			}
		}
	}
}

// A leader being reaped is never signalled by KillAll: its pid, and so its
// group's id, may be a stranger's from then on (red team of 38665c6: the
// mark is set under the lock KillAll holds, before the reap). The stranger
// here is a process group of this test's own, standing for one that reused
// the id.
func TestKillAllSparesAReapedLeadersGroup(t *testing.T) {
	stranger := exec.Command("/bin/sleep", "30")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stranger.Process.Kill(); stranger.Wait() }()
	l := &leader{pid: stranger.Process.Pid}
	h := &hold{}
	live.add(l, h)
	live.reaping(l)
	KillAll()
	live.remove(l)
	if err := syscall.Kill(-stranger.Process.Pid, 0); err != nil {
		t.Fatalf("the group of a leader marked reaped was killed: %v", err)
	}
	// Unmarked, the same group is killed: the test can fail.
	l = &leader{pid: stranger.Process.Pid}
	live.add(l, h)
	KillAll()
	live.remove(l)
	if st, _ := stranger.Process.Wait(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("an unmarked leader's group: %v, want killed", st)
	}
}

// A KillAll that runs while a program is being launched (after its run's
// cancel was checked, before the program is in live) misses it; the launch
// then kills it itself as it registers, at once and not by the ladder, whose
// SIGINT and SIGTERM this program ignores (red team of 4677449: outside
// Linux nothing else would end it once the daemon exits).
func TestKillAllDuringLaunchKillsAtRegistration(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	epoch := live.epoch() // as run reads it, before it checks the cancel
	cancel()
	KillAll() // the second signal's: the program is not in live yet
	o := &Outcome{ExitCode: -1}
	start := time.Now()
	execute(ctx, Spec{Argv: []string{"/bin/sh", "-c", "trap '' INT TERM; sleep 30"}, Env: []string{testPath}, Dir: "/",
		Grace: time.Minute}, "/bin/sh", o, nil, epoch)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the program lived %v: the ladder's minute of grace, not a kill at registration", d)
	}
	if !o.Cancelled || o.Signal != "SIGKILL" {
		t.Errorf("outcome: cancelled %v, signal %q, start error %v; want cancelled, SIGKILL", o.Cancelled, o.Signal, o.StartErr)
	}
	// A cancel alone, with no KillAll since the epoch, is the ladder's.
	ctx2, cancel2 := context.WithCancel(context.Background())
	epoch = live.epoch()
	cancel2()
	o = &Outcome{ExitCode: -1}
	execute(ctx2, Spec{Argv: []string{"/bin/sh", "-c", "sleep 30"}, Env: []string{testPath}, Dir: "/", Grace: time.Minute}, "/bin/sh", o, nil, epoch)
	if !o.Cancelled || o.Signal == "SIGKILL" {
		t.Errorf("a plain cancel: cancelled %v, signal %q; want cancelled, ended by the ladder's first signal", o.Cancelled, o.Signal)
	}
}
