package host

import (
	"testing"
	"time"

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
	waitFor(t, 20*time.Second, "the first collection and sweeps", func() bool {
		return d.startScanDone() && !d.awaitingMaybe.Load() && !d.stalledMaybe.Load()
	})
	wakes, scans := d.probe.n(controlWakes), d.probe.n(sweepScans)
	time.Sleep(4 * time.Second)
	if n := d.probe.n(controlWakes) - wakes; n > 1 {
		t.Errorf("the idle control loop woke %d times in 4 s, want at most 1", n)
	}
	if n := d.probe.n(sweepScans) - scans; n != 0 {
		t.Errorf("the idle daemon scanned the ledger %d times in 4 s, want none", n)
	}
}

// An entry that begins to wait for a sweep wakes an idle control loop at
// once, to set the sweep's timer: asleep on its 30 s fallback, the loop
// would otherwise sweep it that late (a red team's finding).
func TestIdleLoopWokenByAWaitingEntry(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := runDaemon(t, p.host, DaemonOptions{PendingTimeout: 2 * time.Second})
	waitFor(t, 20*time.Second, "the first collection and sweeps", func() bool {
		return d.startScanDone() && !d.awaitingMaybe.Load() && !d.stalledMaybe.Load()
	})
	wakes := d.probe.n(controlWakes)
	d.noteState(ledger.StateAwaitingApproval)
	waitFor(t, 5*time.Second, "the control loop to wake", func() bool { return d.probe.n(controlWakes) > wakes })
}
