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
