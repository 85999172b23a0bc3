//go:build linux

package runner

import (
	"context"
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
		for liveCount() == 0 {
			time.Sleep(10 * time.Microsecond)
		}
		cancel()
		KillAll()
		o := <-ch
		if o.StartErr == nil && !o.Cancelled {
			t.Fatalf("try %d: a run cancelled and then killed reads as its own end (signal %q, exit %d)", i, o.Signal, o.ExitCode)
		}
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
