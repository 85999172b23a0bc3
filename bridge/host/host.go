package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/runner"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// RunnerMain must be the first call in the bridge binary's main: when the
// binary was started as the runner's resource-limit shim it applies the
// limits and execs the op, and never returns.
func RunnerMain() { runner.Main() }

// LedgerEntry is one request in the host's ledger.
type LedgerEntry = ledger.Entry

// Reconcile settles an uncertain request: as "done" (the op had its effect),
// "failed" (it did not) or "rerun" (run it again). ref names the request
// (its id, or AGENT/ID). With the daemon stopped it acts at once; with the
// daemon running it leaves an order the daemon picks up within a second
// (Queued), and returns the request as it stands.
func Reconcile(h *trust.Home, ref, as string) (*operator.Decision, error) {
	if err := operator.HostOnly(h, "reconcile"); err != nil {
		return nil, err
	}
	if as != "done" && as != "failed" && as != "rerun" {
		return nil, fmt.Errorf("reconcile: --as must be done, failed or rerun")
	}
	d, err := NewDaemon(h, DaemonOptions{})
	if err != nil {
		return nil, err
	}
	if err := d.openCore(); err != nil {
		if !errors.Is(err, syncsafe.ErrLocked) {
			return nil, err
		}
		e, err := operator.SnapshotEntry(h, ref, ledger.StateUncertain)
		if err != nil {
			return nil, err
		}
		if as == "rerun" {
			// The daemon checks the payload itself; this says so now.
			if _, err := os.Lstat(filepath.Join(h.Config.Folder, bridge.RequestPath(h.Config.ID, e.Agent, e.ID, bridge.ExtPayload))); err != nil {
				return nil, rerunRefused(e.Key, err)
			}
		}
		if err := operator.WriteOrder(h, operator.Order{Key: e.Key, As: as}); err != nil {
			return nil, err
		}
		return &operator.Decision{Listed: operator.ListedOf(h, *e), Queued: true}, nil
	}
	defer d.closeResources()
	all, err := d.ledger.List(nil)
	if err != nil {
		return nil, err
	}
	e, err := operator.ResolveRef(h, all, ref, ledger.StateUncertain)
	if err != nil {
		return nil, err
	}
	got, err := d.reconcile(e.Key, as)
	if err != nil {
		return nil, err
	}
	return &operator.Decision{Listed: operator.ListedOf(h, *got)}, nil
}

// reconcile applies a human's settlement of an uncertain request.
func (d *Daemon) reconcile(key, as string) (*LedgerEntry, error) {
	if !d.sched.take(key) {
		return nil, errBusy
	}
	defer d.sched.release(key)
	e, err := d.ledger.Get(key)
	if err != nil {
		return nil, err
	}
	if e.State != ledger.StateUncertain {
		return nil, fmt.Errorf("request %s is %s, not %s", key, e.State, ledger.StateUncertain)
	}
	keys := d.agents()[e.Agent]
	if keys == nil {
		return nil, fmt.Errorf("reconcile %s: agent %s is no longer trusted", key, e.Agent)
	}
	j, err := d.reload(e, keys)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", key, err)
	}
	if as == "rerun" {
		// A rerun needs the request's payload, from the folder: its agent
		// may have taken its files away once it read the uncertain answer.
		in, err := d.settle(j)
		if err != nil {
			return nil, rerunRefused(key, err)
		}
		in.Close()
	}
	// The uncertain result is replaced by a new one: its private copies
	// are set aside (the manifest first: the pair is no longer kept), not
	// removed, so that a rerun the ledger then loses (a crash before the
	// step below, a ledger restored from a backup) still has its answer
	// to publish again (restoreSuperseded).
	dir := d.home.Path("results", e.Agent)
	for _, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		// An earlier rerun's set-aside pair goes first: one cut short
		// between the two renames below must not leave this answer's
		// manifest beside that answer's output.
		os.Remove(filepath.Join(dir, e.ID+"."+ext+supersededSuffix))
	}
	for _, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		p := filepath.Join(dir, e.ID+"."+ext)
		if err := os.Rename(p, p+supersededSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reconcile %s: set the uncertain result aside: %w", key, err)
		}
	}
	if err := syncsafe.SyncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reconcile %s: %w", key, err)
	}
	d.audit.log(AuditEvent{Event: "reconcile", Agent: e.Agent, ID: e.ID, Op: e.Op, Detail: "as " + as})
	if as == "rerun" {
		ent, err := d.step(key, evRerun, func(x *ledger.Entry) { x.Reason = "rerun by operator" })
		if err != nil {
			return nil, err
		}
		d.fin.drop(key) // its uncertain answer no longer ends it: rescans must look at it
		// The agent holds the uncertain answer: tell it that another one
		// comes, so that `bridge wait` and `logs -f` wait for it.
		d.out.notify(e.Agent, bridge.Note{Event: bridge.EventRerunOrdered, Request: e.ID, Supersedes: e.ResultSHA256,
			Text: fmt.Sprintf("a human on the host ordered request %s (%s) run again; its answer replaces the uncertain one", e.ID, e.Op)})
		if d.watcher != nil { // serving: run it now
			if ent, err = d.step(key, evUnclaim, nil); err == nil {
				d.sched.schedule(e.Agent, e.ID) // queued once the key is released
			}
		}
		return &ent, err
	}
	status := bridge.StatusDone
	if as == "failed" {
		status = bridge.StatusFailed
	}
	if err := d.answer(j, evSettle, bridge.Receipt{Status: status, Reason: bridge.ReasonReconciled, Op: e.Op,
		Detail: "an operator settled the uncertain run as " + as}, nil, nil); err != nil {
		return nil, err
	}
	ent, err := d.ledger.Get(key)
	return &ent, err
}

// controlLoop applies the orders the CLI left while the daemon runs, and
// notices what other bridge commands changed in the home: trusted peers
// (keys trust, pair, revoke), its own keys (keys rotate) and the policy.
// It sleeps until something asks for it: a change in the home, the control
// directory or the peers directory (notify hints, syncsafe.WatchDirs), or
// the next deadline of its own (liveness stamps, collection, the sweeps
// while something waits for them). notify may drop events, so it also
// looks with every rescan of the folder (Run pokes it after each full
// walk), and by itself if no rescan comes: limits.controlFallback after
// its last look until a first rescan, rescanHorizon after one. A change is
// noticed within that at worst, at once as a rule. A look at a rescan also
// does the collection and the liveness stamps if they fall due before the
// next rescan, so that an idle process has one moment of work a rescan:
// each brings a burst of the Go runtime's own context switches
// (BENCHMARKS.md, "Session 26", which also finds that the rescan's own
// burst outweighs what this saves).
func (d *Daemon) controlLoop(stop <-chan struct{}) {
	defer d.probe.Add(probe.ControlEnds)
	// Both made first: a directory that does not exist cannot be watched,
	// and a host started before its first pairing has no peers yet (its
	// creation is seen in the home, but not a second agent's pairing).
	dirs := []string{d.home.Dir, d.home.Path(trust.PeersDir), d.home.Path("control")}
	for _, dir := range dirs[1:] {
		os.MkdirAll(dir, 0o700)
	}
	if real, err := filepath.EvalSymlinks(d.home.Path(trust.PolicyName)); err == nil && filepath.Dir(real) != d.home.Dir {
		dirs = append(dirs, filepath.Dir(real)) // a linked policy is edited where it lives
	}
	hints, err := syncsafe.WatchDirs(dirs...)
	if err != nil {
		d.log.Debug("watch the home for changes: looking every "+d.limits.controlFallback.String(), "err", err)
	}
	defer hints.Close()
	// Entries from before the start may wait for the sweeps; a ledger that
	// holds none needs neither (each sweep would wake a napping ledger, and
	// its BuntDB ticker with it, a minute after every start). Only ever
	// set here: an entry entering such a state meanwhile set it already
	// (noteState).
	if ws, err := d.ledger.InState(ledger.StateAwaitingApproval); err != nil || len(ws) > 0 {
		d.awaitingMaybe.Store(true)
	}
	if ss, err := d.ledger.InState(ledger.StateSeen, ledger.StatePending); err != nil || len(ss) > 0 {
		d.stalledMaybe.Store(true)
	}
	peersStamp := d.keys.loadedFrom
	// The first collection waits until the start-up scan has been
	// evaluated: on a folder of 100,000 finished requests it scans every
	// ledger record, which must not delay the first answers.
	collected := false
	start := time.Now() // monotonic: the loop's own schedule
	var lastGC, lastWaiting, lastStalled time.Time
	lastWaiting, lastStalled = start, start
	rescans := false // rescans poke the loop: its own look waits for them
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	for {
		early := time.Duration(0) // periodic work due within this is done now
		select {
		case <-stop:
			return
		case <-hints.C:
			// A command's change is a few steps (temp, write, rename):
			// look once it is done, not in the middle of it.
			select {
			case <-stop:
				return
			case <-time.After(hintSettle):
			}
			select {
			case <-hints.C:
			default:
			}
		case <-timer.C:
			d.probe.Add(probe.TimerWakes)
		case <-d.controlPoke:
			// An entry began to wait for a sweep: only the timer is set
			// again, from the loop's own schedule.
		case <-d.rescanned:
			rescans = true
			early = d.limits.rescanHorizon(d.opt.Rescan)
			d.probe.Add(probe.RescanLooks)
		}
		d.probe.Add(probe.ControlWakes)
		now := time.Now()
		soon := false // something asks to be looked at again in a second
		if !collected {
			if d.startScanDone() {
				collected, lastGC = true, now
				d.probe.Add(probe.Collections)
				d.pruneFinished()
				d.gc.sweepTemps(d.openedAt)
				d.gc.run(GCOptions{})
			} else {
				soon = true
			}
		} else if dueWithin(now.Sub(lastGC), d.limits.collectEvery, early) {
			lastGC = now
			d.probe.Add(probe.Collections)
			d.gc.run(GCOptions{})
			if err := d.fin.save(); err != nil {
				d.log.Warn("save the finished-requests cache", "err", err)
			}
		}
		sweep := d.awaitingMaybe.Load() && now.Sub(lastWaiting) >= sweepWaitingEvery
		if v := d.keys.peersVersion(); v != peersStamp {
			peersStamp = v
			if err := d.keys.loadAgents(); err != nil {
				d.log.Error("reload trusted agents", "err", err)
			} else {
				d.log.Info("trusted agents reloaded", "agents", len(d.agents()))
				d.out.publishForAgents()
				// A newly trusted agent's requests may be in the folder
				// already, seen and ignored: read them now, not at the
				// next rescan (up to --rescan, 30 s, for a first op).
				if d.watcher != nil {
					d.watcher.Walk()
				}
			}
			sweep = d.awaitingMaybe.Load() // a revocation answers what waits for approval at once,
			d.revokeWaiting()              // and what waits for a slot of its op
		}
		if sweep {
			lastWaiting = now
			d.sweepWaiting()
		}
		if d.stalledMaybe.Load() && now.Sub(lastStalled) >= stalledEvery(d.opt.PendingTimeout) {
			lastStalled = now
			d.sweepStalled()
		}
		if d.policy.check() {
			// What waits for an approval or a slot is judged again when it
			// moves (approvedAsShown, stillAsAdmitted); what waits to be
			// claimed is evaluated afresh.
			d.sweepWaiting()
		}
		if d.policy.unsettled() {
			soon = true // read again once it stays as it is
		}
		d.out.refreshLiveness(early)
		if err := d.keys.loadOwnKeys(); err != nil {
			d.log.Error("reload own keys", "err", err)
		}
		if d.applyOrders() {
			soon = true // an order whose request was busy
		}

		// The next deadline.
		next := d.limits.controlFallback
		if rescans {
			// The next rescan's poke brings the look; this one only if
			// it does not come (the requests directory gone: the
			// watcher then only looks for it again).
			next = d.limits.rescanHorizon(d.opt.Rescan)
		}
		if soon {
			next = time.Second
		}
		if collected {
			next = min(next, lastGC.Add(d.limits.collectEvery).Sub(now))
		}
		if d.awaitingMaybe.Load() {
			next = min(next, lastWaiting.Add(sweepWaitingEvery).Sub(now))
		}
		if d.stalledMaybe.Load() {
			next = min(next, lastStalled.Add(stalledEvery(d.opt.PendingTimeout)).Sub(now))
		}
		next = min(next, d.out.livenessDue())
		timer.Reset(max(next, 10*time.Millisecond))
	}
}

// peersVersion identifies what the peers directory holds: each entry's
// name, size and modification time. (The directory's own time alone can
// miss a change made within the same clock tick as the one before.)
func (k *keyring) peersVersion() string {
	ents, err := os.ReadDir(k.home.Path(trust.PeersDir))
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "%s %d %d\n", e.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

// rescanHorizon is how long the control loop, poked by a rescan, counts on
// the next one: the rescan interval (at most the loop's own fallback) and a
// slack for the walk's own time and a busy moment.
func (l *limits) rescanHorizon(rescan time.Duration) time.Duration {
	return min(rescan, l.controlFallback) + rescanSlack
}

const rescanSlack = 2 * time.Second

// dueWithin reports whether work done every interval, last done elapsed
// ago, is due or falls due within early; early counts for at most half
// the interval, so that the work is never done more than twice as often.
func dueWithin(elapsed, interval, early time.Duration) bool {
	return elapsed >= interval-min(early, interval/2)
}

// The control loop's schedule (beside the limits' controlFallback and
// collectEvery): the sweep of requests awaiting approval (while any may).
var (
	hintSettle        = 50 * time.Millisecond
	sweepWaitingEvery = 5 * time.Second
)

// applyOrders carries out the orders the CLI left in the control directory.
// An order whose request is busy at the moment stays for the next look; it
// reports whether one did.
func (d *Daemon) applyOrders() (left bool) {
	files, _ := filepath.Glob(d.home.Path("control", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		var o operator.Order
		if err != nil || json.Unmarshal(data, &o) != nil {
			os.Remove(f)
			continue
		}
		switch {
		case o.IsAudit():
			if e, ok := readAuditOrder(f); ok && strings.HasPrefix(filepath.Base(f), auditOrderPrefix) {
				d.audit.log(e)
			} else {
				d.log.Warn("an audit order that is not an operator's action was dropped", "file", f)
			}
		case o.GC:
			d.gc.run(GCOptions{Grace: o.Grace, Retention: o.Retention, Before: o.At})
		case o.As == "approve" || o.As == "deny":
			err = d.decide(o.Key, o.As == "approve", o.Why)
		default:
			_, err = d.reconcile(o.Key, o.As)
		}
		if errors.Is(err, errBusy) {
			left = true
			continue
		}
		os.Remove(f)
		if err != nil {
			d.log.Warn(o.As, "request", o.Key, "err", err)
		}
	}
	return left
}

func rerunRefused(key string, err error) error {
	return bridge.WithHint(fmt.Errorf("reconcile %s --as rerun: the request's payload is not in the folder: %w", key, err),
		"settle it as done or failed; if it must run again, the agent sends it again as a new request")
}
