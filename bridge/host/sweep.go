package host

import (
	"fmt"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Sweeps: the requests no file event brings back to the daemon, looked at
// by the control loop. Whatever they answer, they own the request's key
// first, like every other path.

// sweepWaiting looks at every request awaiting approval (every few
// seconds, and at once when the trusted peers change): one whose key was
// revoked, whose agent cancelled it or whose time ran out is answered.
func (d *Daemon) sweepWaiting() {
	// Cleared before the scan, set again by any entry it finds or that
	// enters the state meanwhile (noteState): never cleared past one.
	d.awaitingMaybe.Store(false)
	d.probe.Add(probe.SweepScans)
	waiting, err := d.ledger.InState(ledger.StateAwaitingApproval)
	if err != nil {
		d.awaitingMaybe.Store(true)
		return
	}
	if len(waiting) > 0 {
		d.awaitingMaybe.Store(true)
	}
	for _, e := range waiting {
		keys := d.agents()[e.Agent]
		if keys == nil || !d.sched.take(e.Key) {
			continue
		}
		if j, err := d.reload(e, keys); err == nil {
			d.decideWaiting(j, e)
		}
		d.sched.release(e.Key)
	}
}

// sweepStalled answers the requests that wait for files no longer in the
// folder (its agent gave up and removed them, a sync client lost them): no
// evaluation would ever come back to them. Once the pending timeout has
// passed since the entry last moved, one that never ran is rejected
// incomplete; one a human asked to run again is uncertain, as it was
// (rerun-refused, by answer).
func (d *Daemon) sweepStalled() {
	d.stalledMaybe.Store(false) // as in sweepWaiting
	d.probe.Add(probe.SweepScans)
	stalled, err := d.ledger.InState(ledger.StateSeen, ledger.StatePending)
	if err != nil {
		d.stalledMaybe.Store(true)
		return
	}
	if len(stalled) > 0 {
		d.stalledMaybe.Store(true)
	}
	now := d.opt.Now()
	for _, e := range stalled {
		if now.Sub(e.Updated) <= d.opt.PendingTimeout {
			continue
		}
		if manifestThere(d.folder, d.me, e) {
			continue // there: evaluations (events, rescans) take care of it
		}
		keys := d.agents()[e.Agent]
		if keys == nil || !d.sched.take(e.Key) {
			continue
		}
		if j, err := d.reload(e, keys); err == nil && !d.adopt(j, e) && !d.holdBehind(j, e) {
			d.answer(j, evIncomplete, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.ReasonIncomplete, Op: e.Op,
				Detail: fmt.Sprintf("its files left the folder, and %s passed", d.opt.PendingTimeout)}, nil, nil)
		}
		d.sched.release(e.Key)
	}
}

// manifestThere reports whether the folder holds e's own manifest, the
// bytes the ledger recorded: evaluations take care of such a request.
// Anything else at its name (junk, another manifest of the id, a link, a
// directory) is refused by them, and marked so that rescans skip it: the
// request would wait for ever if the sweep took it for its manifest.
func manifestThere(f *syncsafe.Folder, me string, e ledger.Entry) bool {
	data, err := f.ReadFile(bridge.RequestPath(me, e.Agent, e.ID, bridge.ExtManifest), bcrypto.KindRequest.MaxSize())
	return err == nil && bridge.SHA256Hex(data) == e.ManifestSHA256
}

// stalledEvery is how often the stalled sweep runs while an entry may
// wait: a minute, or the pending timeout if that is shorter (it reads the
// ledger's waiting entries, a scan of raw records).
func stalledEvery(pendingTimeout time.Duration) time.Duration {
	return max(time.Second, min(time.Minute, pendingTimeout))
}

// noteState tells the control loop's sweeps that an entry entered a state
// they look at (called after the write, so a sweep that cleared its flag
// before scanning either sees the entry or sees the flag set again).
func (d *Daemon) noteState(s ledger.State) {
	var flipped bool
	switch s {
	case ledger.StateAwaitingApproval:
		flipped = d.awaitingMaybe.CompareAndSwap(false, true)
	case ledger.StateSeen, ledger.StatePending:
		flipped = d.stalledMaybe.CompareAndSwap(false, true)
	}
	if flipped {
		poke(d.controlPoke)
	}
}

// poke wakes a loop waiting on c (buffered 1), once however often it is
// called before the loop looks.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
