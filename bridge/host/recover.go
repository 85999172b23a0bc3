package host

import (
	"slices"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
)

// recover looks at what a crash (or a stop that had to kill ops) left in
// flight (invariant 5), before the daemon serves anything new:
//
//   - a result sealed for it is published and recorded (adopt), and one
//     this host published that the home does not keep (a daemon before
//     session 30 published before it kept; a home restored from a backup)
//     is kept and recorded (catch-up);
//   - claimed never started: it is evaluated again (unclaim);
//   - running may have had its effect: an idempotent op runs again
//     (crash-rerun), an op with a reconcile command asks it (crash-done,
//     or a re-run), any other becomes uncertain and the agent is told
//     (crash-unsure).
//
// First, the kept manifest of every entry whose record carries its bytes
// is made whole again (restoreKept): a power cut may have emptied it.
//
// A result sealed for a request not yet in flight (refused, expired,
// cancelled: a crash between its publish and its record) is adopted too:
// its agent may already have acked it and taken its files away, so no
// evaluation would ever come back to it.
func (d *Daemon) recover() error {
	unanswered, err := d.ledger.InState(ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval,
		ledger.StateClaimed, ledger.StateRunning)
	if err != nil {
		return err
	}
	// An uncertain entry of a home restored from a backup may have been
	// settled or run again since: its newer result in the folder says so.
	uncertain, err := d.ledger.InState(ledger.StateUncertain)
	if err != nil {
		return err
	}
	for _, ent := range slices.Concat(unanswered, uncertain) {
		d.out.restoreKept(ent)
	}
	for _, ent := range uncertain {
		// A rerun lost before the stop: the uncertain answer stands, and
		// its copies come back (not left to a rescan: the finished set may
		// skip the request's files).
		d.out.restoreSuperseded(ent)
		if sha, status, ok := d.out.newerResult(ent); ok && sha != ent.ResultSHA256 && d.sched.take(ent.Key) {
			if keys := d.agents()[ent.Agent]; keys != nil {
				if j, err := d.reload(ent, keys); err == nil {
					d.catchUp(j, ent, sha, status)
				}
			}
			d.sched.release(ent.Key)
		}
	}
	for _, ent := range unanswered {
		// Not finished, whatever the cache says: a rerun ordered before
		// the stop left its uncertain answer there, and the start-up scan
		// would skip the request's files for ever.
		d.fin.drop(ent.Key)
		// A result sealed and maybe published before the crash, but not
		// yet kept: kept now, so that it is adopted below, not taken from
		// the folder (which a folder writer may have emptied since).
		d.out.promoteStaged(ent.Agent, ent.ID, ent.ManifestSHA256)
		if !ent.State.InFlight() {
			sealed := d.out.hasSealedResult(ent.Agent, ent.ID)
			if !sealed {
				// Published, and not kept in the home (a daemon before
				// session 30 published first; a restored home): the
				// folder's is the answer.
				if sha, _, ok := d.out.newerResult(ent); !ok || sha == ent.ResultSHA256 {
					continue
				}
			}
			if d.sched.take(ent.Key) {
				if keys := d.agents()[ent.Agent]; keys != nil {
					if j, err := d.reload(ent, keys); err == nil && !d.adopt(j, ent) {
						d.holdBehind(j, ent)
					}
				}
				d.sched.release(ent.Key)
			}
			continue
		}
		if !d.sched.take(ent.Key) {
			continue // cannot happen before the first evaluation: nothing else runs yet
		}
		if !d.recoverOne(ent) {
			d.sched.release(ent.Key)
		}
	}
	return nil
}

// recoverOne recovers one in-flight entry whose key the caller owns, and
// reports whether it handed the key to a run.
func (d *Daemon) recoverOne(ent ledger.Entry) bool {
	keys := d.agents()[ent.Agent]
	if keys == nil {
		d.log.Warn("in-flight request of an agent no longer trusted: left as it is", "key", ent.Key, "state", ent.State)
		return false
	}
	j, err := d.reload(ent, keys)
	if err != nil {
		d.log.Error("recover: cannot reload the admitted manifest", "key", ent.Key, "err", err)
		return false
	}
	if d.adopt(j, ent) {
		return false
	}
	if sha, status, ok := d.out.newerResult(ent); ok && sha != ent.ResultSHA256 {
		// Answered since the ledger last moved (a home restored from a
		// backup taken while it ran): that answer is what happened.
		d.catchUp(j, ent, sha, status)
		return false
	}
	if ent.State == ledger.StateClaimed {
		if d.holdBehind(j, ent) {
			return false
		}
		if _, err := d.step(ent.Key, evUnclaim, nil); err != nil {
			d.log.Error("recover", "key", ent.Key, "err", err)
			return false
		}
		d.log.Info("recover: claimed but never started; evaluating again", "key", ent.Key)
		d.sched.schedule(ent.Agent, ent.ID) // queued once the key is released
		return false
	}
	unsure := func(detail string) {
		d.answerOrRetry(j, evCrashUnsure, bridge.Receipt{Status: bridge.StatusUncertain, Reason: bridge.ReasonCrashed, Op: ent.Op, Detail: detail}, nil, nil)
	}
	if d.runsUnsure != "" {
		// A process of the interrupted run may still be at work: neither a
		// re-run nor its reconcile command can be trusted to see its effect.
		d.log.Warn("recover: a process of the interrupted op may still run; marking it uncertain", "key", ent.Key, "op", ent.Op, "why", d.runsUnsure)
		unsure("the host stopped while the op ran, and a process of that run may still be running (" + d.runsUnsure +
			"), so it is neither run again nor checked. A human on the host resolves it with `bridge reconcile` once nothing of it runs")
		return false
	}
	in, err := d.settle(j)
	if err != nil {
		if ent.Idempotent {
			unsure("the host stopped while the op ran, and its payload is no longer there to run it again")
		} else {
			d.log.Warn("recover: op was running when the host stopped; marking it uncertain", "key", ent.Key, "op", ent.Op)
			unsure("the host stopped while the op ran; it may or may not have had its effect. A human on the host resolves it with `bridge reconcile`")
		}
		return false
	}
	mode := admitReconcile // not idempotent: its reconcile command, if any, decides
	if ent.Idempotent {
		d.log.Info("recover: re-running an idempotent op", "key", ent.Key, "op", ent.Op)
		mode = admitResume
	}
	return d.admit(j, in, mode)
}
