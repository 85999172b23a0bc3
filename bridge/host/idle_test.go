package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"

	"github.com/syncbridge/bridge/bridge/ledger"
)

// An idle daemon sleeps: with nothing in the folder and nothing in the
// home changing, its control loop wakes only for its own deadlines (none
// within seconds once the start-up scan is collected and the sweeps found
// nothing waiting) and scans no ledger records. It used to wake every
// second and scan the ledger every five.
func TestIdleDaemonSleeps(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := runDaemon(t, p.host, DaemonOptions{PendingTimeout: 2 * time.Second})
	testkit.WaitFor(t, 20*time.Second, "the first collection and sweeps", func() bool {
		return d.startScanDone() && !d.awaitingMaybe.Load() && !d.stalledMaybe.Load()
	})
	// The ledger naps: buntdb's one-second ticker stops (ledger.napAfter).
	testkit.WaitFor(t, 20*time.Second, "the idle daemon's ledger to nap", func() bool {
		naps, _ := d.ledger.Naps()
		return naps >= 1
	})
	wakes, scans := d.probe.N(probe.ControlWakes), d.probe.N(probe.SweepScans)
	_, ledgerWakes := d.ledger.Naps()
	time.Sleep(4 * time.Second)
	if n := d.probe.N(probe.ControlWakes) - wakes; n > 1 {
		t.Errorf("the idle control loop woke %d times in 4 s, want at most 1", n)
	}
	if n := d.probe.N(probe.SweepScans) - scans; n != 0 {
		t.Errorf("the idle daemon scanned the ledger %d times in 4 s, want none", n)
	}
	if _, n := d.ledger.Naps(); n != ledgerWakes {
		t.Errorf("the idle daemon woke its napping ledger %d times in 4 s, want none", n-ledgerWakes)
	}
}

// A daemon started on a ledger that holds nothing waiting for a sweep runs
// neither sweep. Before, each ran on its schedule from the start: with this
// pending timeout the stalled-request sweep 2 s after it and the approval
// sweep 5 s after it, both before the ledger's first nap (5 s after the
// start's last use of it), which they put off; with the default timeout the
// stalled sweep woke the napping ledger a minute after every start.
func TestNoSweepWithNothingWaiting(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := runDaemon(t, p.host, DaemonOptions{PendingTimeout: 2 * time.Second})
	testkit.WaitFor(t, 30*time.Second, "the ledger's first nap", func() bool {
		naps, _ := d.ledger.Naps()
		return naps >= 1
	})
	if n := d.probe.N(probe.SweepScans); n != 0 {
		t.Fatalf("%d sweeps scanned a ledger with nothing waiting before its first nap; want none", n)
	}
}

// A request that comes once the ledger napped wakes it and is served as
// any other; and it is not served twice for it (the ledger opened again
// holds what it held).
func TestRequestAfterTheLedgerNapped(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	p.echo(t, "before")
	testkit.WaitFor(t, 20*time.Second, "the ledger to nap", func() bool {
		naps, _ := p.daemon.ledger.Naps()
		return naps >= 1
	})
	p.echo(t, "after")
	if _, wakes := p.daemon.ledger.Naps(); wakes < 1 {
		t.Fatalf("the ledger served a request while napping (wakes %d)", wakes)
	}
	entries, err := p.daemon.ledger.List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Runs != 1 {
			t.Errorf("%s: %d runs, want 1", e.Key, e.Runs)
		}
	}
	if len(entries) != 2 {
		t.Errorf("%d ledger entries, want 2", len(entries))
	}
}

// An entry that begins to wait for a sweep wakes an idle control loop at
// once, to set the sweep's timer: asleep on its 30 s fallback, the loop
// would otherwise sweep it that late (a red team's finding).
func TestIdleLoopWokenByAWaitingEntry(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := runDaemon(t, p.host, DaemonOptions{PendingTimeout: 2 * time.Second})
	testkit.WaitFor(t, 20*time.Second, "the first collection and sweeps", func() bool {
		return d.startScanDone() && !d.awaitingMaybe.Load() && !d.stalledMaybe.Load()
	})
	wakes := d.probe.N(probe.ControlWakes)
	d.noteState(ledger.StateAwaitingApproval)
	testkit.WaitFor(t, 5*time.Second, "the control loop to wake", func() bool { return d.probe.N(probe.ControlWakes) > wakes })
}

// A ledger file removed while the daemon's ledger napped: the wake refuses
// it, and the daemon stops with why and what to do, rather than fail every
// request it sees (or take a new empty file for its ledger and run them
// again). The request waits in the folder; once the file is back, a restart
// runs it once.
func TestUnusableLedgerStopsTheDaemon(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	env := map[string]string{"COUNT_FILE": countFile}
	p.start(t, env)
	p.echo(t, "before")
	testkit.WaitFor(t, 20*time.Second, "the ledger to nap", func() bool {
		naps, _ := p.daemon.ledger.Naps()
		return naps >= 1
	})
	db := p.host.Path("ledger", "ledger.db")
	if err := os.Rename(db, db+".away"); err != nil {
		t.Fatal(err)
	}
	s, err := p.client.Submit(agent.SubmitOptions{Op: "count"})
	if err != nil {
		t.Fatal(err)
	}
	var runErr error
	select {
	case runErr = <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon still runs 20 s after its ledger file was removed; its log:\n%s", p.logs.String())
	}
	var hinted *bridge.HintError
	if runErr == nil || !strings.Contains(runErr.Error(), "removed or replaced") || !errors.As(runErr, &hinted) {
		t.Fatalf("the daemon stopped with %v, want the ledger's refusal with a hint", runErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.daemon.Close(ctx) // its error is the ledger's again
	p.cancel = nil
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("the stopped daemon left a file at %s: %v", db, err)
	}
	if n := testkit.Count(t, countFile, "run"); n != 0 {
		t.Fatalf("the op ran %d times with the ledger unusable", n)
	}
	if err := os.Rename(db+".away", db); err != nil {
		t.Fatal(err)
	}
	p.start(t, env)
	if out := p.wait(t, s.ID); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("after the restart: %s (%s)", out.Receipt.Status, out.Receipt.Detail)
	}
	if n := testkit.Count(t, countFile, "run"); n != 1 {
		t.Fatalf("the op ran %d times, want once", n)
	}
}

// An idle daemon's control loop wakes with the rescans of the folder, not
// between them: each rescan brings its look at the home (its own look, every
// controlFallback, comes only while no rescan does), and the liveness
// stamps and the collection due before the next rescan are done at this one,
// but not more than twice an interval. Before, the loop kept a schedule of
// its own beside the rescans': a second wake-up of the idle process each
// interval, and one more for each stamp and each collection.
func TestIdleControlLoopWakesWithTheRescans(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	// Stamps and collections due every 6 s, rescans every second: each is
	// done at the first look 3.6 s on (2.4 s early at most, the horizon),
	// about 2 s before its own deadline, a margin for a look made late by
	// a busy machine.
	d := runDaemonTuned(t, p.host, DaemonOptions{Rescan: time.Second, LivenessInterval: 6 * time.Second},
		func(l *limits) { l.controlFallback, l.collectEvery = 400*time.Millisecond, 6*time.Second })
	testkit.WaitFor(t, 20*time.Second, "the first collection and sweeps", func() bool {
		return d.startScanDone() && !d.awaitingMaybe.Load() && !d.stalledMaybe.Load() && d.probe.N(probe.Collections) >= 1
	})
	testkit.WaitFor(t, 10*time.Second, "a look brought by a rescan", func() bool { return d.probe.N(probe.RescanLooks) >= 1 })
	r0, w0 := d.probe.N(probe.RescanLooks), d.probe.N(probe.TimerWakes)
	s0, c0 := d.probe.N(probe.LivenessRounds), d.probe.N(probe.Collections)
	start := time.Now()
	const looks = 9
	testkit.WaitFor(t, 60*time.Second, "nine more rescans' looks", func() bool { return d.probe.N(probe.RescanLooks) >= r0+looks })
	elapsed := time.Since(start)
	r, w := d.probe.N(probe.RescanLooks)-r0, d.probe.N(probe.TimerWakes)-w0
	s, c := d.probe.N(probe.LivenessRounds)-s0, d.probe.N(probe.Collections)-c0
	if w != 0 {
		// (Wakes for a change in the home are not its schedule: the
		// collection's save of the finished set is one.)
		t.Errorf("the idle control loop woke %d times for a deadline of its own over %d looks brought by rescans, want none", w, r)
	}
	// At most twice an interval: one round every 3 s of the window, and
	// the one it may have begun with.
	most := int64(elapsed/(3*time.Second)) + 1
	for _, x := range []struct {
		what string
		n    int64
	}{{"liveness rounds", s}, {"collections", c}} {
		if x.n == 0 {
			t.Errorf("no %s over %d looks in %v (interval 6 s): the test saw none to align", x.what, r, elapsed.Round(time.Millisecond))
		} else if x.n > most {
			t.Errorf("%d %s in %v, want at most %d (twice an interval of 6 s)", x.n, x.what, elapsed.Round(time.Millisecond), most)
		}
	}
}

// With no rescan to bring it (a folder that cannot be watched; here a
// rescan interval of an hour), the control loop still looks at the home by
// itself, the shorter of the rescan interval and controlFallback plus 2 s
// after its last look.
func TestControlLoopLooksByItselfWithoutRescans(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := runDaemonTuned(t, p.host, DaemonOptions{Rescan: time.Hour},
		func(l *limits) { l.controlFallback = 400 * time.Millisecond })
	testkit.WaitFor(t, 20*time.Second, "the first collection and sweeps", func() bool {
		return d.startScanDone() && !d.awaitingMaybe.Load() && !d.stalledMaybe.Load() && d.probe.N(probe.Collections) >= 1
	})
	testkit.WaitFor(t, 10*time.Second, "the start-up scan's look", func() bool { return d.probe.N(probe.RescanLooks) >= 1 })
	r0, w0 := d.probe.N(probe.RescanLooks), d.probe.N(probe.TimerWakes)
	testkit.WaitFor(t, 15*time.Second, "two looks of the loop's own", func() bool { return d.probe.N(probe.TimerWakes) >= w0+2 })
	if r := d.probe.N(probe.RescanLooks); r != r0 {
		t.Fatalf("%d looks brought by rescans with a rescan interval of an hour", r-r0)
	}
}

// Periodic work is due at its interval, or within the early time a look at
// a rescan gives it, but never more than twice an interval.
func TestDueWithin(t *testing.T) {
	t.Parallel()
	const s = time.Second
	for _, c := range []struct {
		elapsed, interval, early time.Duration
		due                      bool
	}{
		{299 * s, 300 * s, 0, false},
		{300 * s, 300 * s, 0, true},
		{267 * s, 300 * s, 32 * s, false},
		{268 * s, 300 * s, 32 * s, true},
		{1400 * time.Millisecond, 3 * s, 2400 * time.Millisecond, false}, // early capped at half the interval
		{1500 * time.Millisecond, 3 * s, 2400 * time.Millisecond, true},
		{0, 3 * s, time.Hour, false},
	} {
		if got := dueWithin(c.elapsed, c.interval, c.early); got != c.due {
			t.Errorf("dueWithin(%v, %v, %v) = %v, want %v", c.elapsed, c.interval, c.early, got, c.due)
		}
	}
}
