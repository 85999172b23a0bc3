package host

import (
	"errors"
	"fmt"
	"slices"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/runner"
)

// The request lifecycle, written down once (docs/DESIGN.md §6 has the same
// table, with the test that covers each row). Every change of a request's
// ledger state is one of these events, taken by Daemon.step (no answer) or
// Daemon.answer (a signed result first, then the step). An event names the
// states it may leave and the one it enters; the ledger's own state machine
// must allow each of them (TestLifecycleTableMatchesLedger).
//
// Rules the table keeps:
//   - An op that started (running) ends done, failed only if its process
//     never started, cancelled, or uncertain; never rejected or expired.
//   - An answer is published only if its step is allowed from where the
//     entry stands, and the entry is then moved: a step the ledger refuses
//     after the answer is out is a broken invariant, and stops the daemon.
//   - uncertain is answered but not final: only a human (reconcile) moves
//     it, or a result this host signed, found when its ledger was behind
//     (catch-up): the host's own answer is what happened.

// event is something that happens to a request.
type event string

const (
	evDeliver       event = "deliver"        // an authentic request is recorded for the first time
	evRecordLost    event = "record-lost"    // new to the ledger, but the host admitted it before (repair, restore)
	evWaitPayload   event = "wait-payload"   // the payload is not complete yet
	evIncomplete    event = "incomplete"     // the payload never completed within the pending timeout
	evRefuse        event = "refuse"         // authentic but refused: its times, key, policy, arguments, ceiling
	evHostError     event = "host-error"     // allowed, but the host cannot prepare it (missing program, bad dir)
	evExpire        event = "expire"         // past its signed expiry or the host's queue age, before it started
	evCancelEarly   event = "cancel-early"   // the agent cancelled it before it started
	evAwaitApproval event = "await-approval" // the op needs a human's approval
	evApprove       event = "approve"        // a human approved it
	evDeny          event = "deny"           // a human denied it
	evApprovalTTL   event = "approval-ttl"   // nobody approved it in time
	evRevoke        event = "revoke"         // its signing key was revoked before it started
	evClaim         event = "claim"          // it takes a place of its op
	evUnclaim       event = "unclaim"        // a claim that never started is given back (restart)
	evStart         event = "start"          // the process is about to start (ledger before effect)
	evExit          event = "exit"           // the op ended (its own exit, a signal, or its timeout)
	evStartFailed   event = "start-failed"   // the process could not be started
	evCancelRun     event = "cancel-run"     // the agent cancelled it while it ran
	evDrainAbort    event = "drain-abort"    // the daemon stopped it after the drain deadline (not retry-safe)
	evCrashRerun    event = "crash-rerun"    // a crash interrupted it; it is retry-safe and runs again
	evCrashUnsure   event = "crash-unsure"   // a crash interrupted it; whether it had its effect is unknown
	evCrashDone     event = "crash-done"     // a crash interrupted it; its reconcile command says it happened
	evSettle        event = "settle"         // a human settled an uncertain run as done or failed
	evRerun         event = "rerun"          // a human asked to run an uncertain request again
	evRerunRefused  event = "rerun-refused"  // a human's rerun cannot start (expired, revoked, cancelled, its files gone, ...)
	evAdopt         event = "adopt"          // a result sealed but not recorded (a crash, a failed publish) is published and recorded
	evCatchUp       event = "catch-up"       // a ledger found behind a result this host signed records that result (after record-lost)
)

// transition is one row of the table: the states an event may leave, the
// one it enters, and whether it answers the agent (a result is published).
type transition struct {
	from   []ledger.State
	to     []ledger.State // one state, or for settle the two a human may choose
	answer bool
}

// stateNone stands for "no entry": an event from it creates the entry
// (Daemon.create).
const stateNone ledger.State = ""

var (
	none      = []ledger.State{stateNone}
	waiting   = []ledger.State{ledger.StateSeen, ledger.StatePending}
	unstarted = []ledger.State{ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval, ledger.StateClaimed}
	one       = func(s ...ledger.State) []ledger.State { return s }
	inFlux    = []ledger.State{ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval, ledger.StateClaimed, ledger.StateRunning}
	// sealed stands for the state of whatever result was sealed (adopt):
	// where the ledger cannot go there, the entry becomes uncertain.
	sealed = []ledger.State{ledger.StateDone, ledger.StateFailed, ledger.StateRejected, ledger.StateExpired, ledger.StateCancelled, ledger.StateUncertain}
)

var lifecycle = map[event]transition{
	evDeliver:       {none, one(ledger.StateSeen), false},
	evRecordLost:    {one(stateNone, ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval, ledger.StateClaimed), one(ledger.StateUncertain), true},
	evWaitPayload:   {one(ledger.StateSeen), one(ledger.StatePending), false},
	evIncomplete:    {waiting, one(ledger.StateRejected), true},
	evRefuse:        {one(ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval, ledger.StateClaimed), one(ledger.StateRejected), true},
	evHostError:     {one(ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval), one(ledger.StateFailed), true},
	evExpire:        {one(ledger.StateSeen, ledger.StatePending, ledger.StateClaimed), one(ledger.StateExpired), true},
	evCancelEarly:   {unstarted, one(ledger.StateCancelled), true},
	evAwaitApproval: {waiting, one(ledger.StateAwaitingApproval), false},
	evApprove:       {one(ledger.StateAwaitingApproval), one(ledger.StateClaimed), false},
	evDeny:          {one(ledger.StateAwaitingApproval), one(ledger.StateRejected), true},
	evApprovalTTL:   {one(ledger.StateAwaitingApproval), one(ledger.StateExpired), true},
	evRevoke:        {unstarted, one(ledger.StateRejected), true},
	evClaim:         {waiting, one(ledger.StateClaimed), false},
	evUnclaim:       {one(ledger.StateClaimed), one(ledger.StatePending), false},
	evStart:         {one(ledger.StateClaimed), one(ledger.StateRunning), false},
	evExit:          {one(ledger.StateRunning), one(ledger.StateDone), true},
	evStartFailed:   {one(ledger.StateRunning), one(ledger.StateFailed), true},
	evCancelRun:     {one(ledger.StateRunning), one(ledger.StateCancelled), true},
	evDrainAbort:    {one(ledger.StateRunning), one(ledger.StateUncertain), true},
	evCrashRerun:    {one(ledger.StateRunning), one(ledger.StateRunning), false},
	evCrashUnsure:   {one(ledger.StateRunning), one(ledger.StateUncertain), true},
	evCrashDone:     {one(ledger.StateRunning), one(ledger.StateDone), true},
	evSettle:        {one(ledger.StateUncertain), one(ledger.StateDone, ledger.StateFailed), true},
	evRerun:         {one(ledger.StateUncertain), one(ledger.StateClaimed), false},
	evRerunRefused:  {append(slices.Clone(unstarted), ledger.StateRunning), one(ledger.StateUncertain), true},
	evAdopt:         {append(slices.Clone(inFlux), stateNone), sealed, true},
	evCatchUp:       {one(ledger.StateUncertain), one(ledger.StateDone, ledger.StateFailed, ledger.StateCancelled), true},
}

// statusState is the ledger state that records a result of each status.
var statusState = map[string]ledger.State{
	bridge.StatusDone: ledger.StateDone, bridge.StatusFailed: ledger.StateFailed, bridge.StatusRejected: ledger.StateRejected,
	bridge.StatusExpired: ledger.StateExpired, bridge.StatusCancelled: ledger.StateCancelled, bridge.StatusUncertain: ledger.StateUncertain,
}

// errLifecycle marks a step the table does not allow from where the entry
// stands: nothing was done. errViolation marks a step the ledger refused
// after its answer was published: the daemon stops.
var (
	errLifecycle = errors.New("not allowed by the request lifecycle")
	errBehind    = errors.New("the ledger was behind what this host did with it; recorded that instead")
	errViolation = errors.New("lifecycle violation")
)

// step takes an event that does not answer the agent: a compare-and-set of
// the entry of the job's key from one of the event's states. The caller
// owns the key. mutate, if not nil, may set the entry's op fields.
func (d *Daemon) step(key string, ev event, mutate func(*ledger.Entry)) (ledger.Entry, error) {
	t, ok := lifecycle[ev]
	if !ok || t.answer || len(t.to) != 1 || slices.Contains(t.from, stateNone) {
		panic(fmt.Sprintf("bridge: internal error: %s is not a step without an answer", ev))
	}
	d.probe.Event(string(ev))
	transition := d.ledger.Transition
	if lazySteps[ev] {
		transition = d.ledger.TransitionLazy
	}
	e, err := transition(key, t.from, t.to[0], mutate)
	if errors.Is(err, ledger.ErrWrongState) {
		return e, fmt.Errorf("%s: %w: %w", ev, errLifecycle, err)
	}
	if err == nil {
		d.noteState(e.State)
		if !lazySteps[ev] {
			d.out.keptDurable(key)
		}
	}
	return e, err
}

// create makes the entry of a request new to the ledger, by an event the
// table lets start from no entry, in a state the event may enter: the only
// way an entry comes to be. durable: on disk before it returns; else with
// the next durable write (ledger.AdmitLazy). created is false for an id the
// ledger holds already (e is then its entry).
func (d *Daemon) create(ev event, e ledger.Entry, durable bool) (ent ledger.Entry, created bool, err error) {
	t, ok := lifecycle[ev]
	if !ok || !slices.Contains(t.from, stateNone) || !slices.Contains(t.to, e.State) || !ledger.CanAdmit(e.State) {
		panic(fmt.Sprintf("bridge: internal error: %s does not create an entry in %s", ev, e.State))
	}
	admit := d.ledger.AdmitLazy
	if durable {
		admit = d.ledger.Admit
	}
	ent, created, err = admit(e)
	if created {
		d.probe.Event(string(ev))
	}
	return ent, created, err
}

// lazySteps are the steps whose record need not be on disk before the
// daemon goes on (ledger.TransitionLazy): each leaves a request that never
// started, which a crash that loses the step evaluates again from the
// state before. The next durable step (start, above all: invariant 3)
// writes them with its own fsync. A human's approval is not one of them:
// it must not be lost.
var lazySteps = map[event]bool{evWaitPayload: true, evClaim: true, evUnclaim: true}

// answer publishes the job's result, then takes the event that records it
// (invariant 3: the result is out before the ledger says so). Nothing is
// published unless the event may leave the entry's current state
// (errLifecycle); a refusal after the result is out is a broken invariant
// (errViolation, and the daemon stops). Any other error is a failed
// publish: nothing changed, and trying again is safe.
//
// A result sealed by an earlier attempt (a crash or a failed publish after
// sealing) is published instead of rc: one id has one result, and the
// entry then records that result's status.
func (d *Daemon) answer(j *job, ev event, rc bridge.Receipt, stdout, stderr []byte) error {
	return d.answerOut(j, ev, rc, runner.Output{Data: stdout}, runner.Output{Data: stderr})
}

// answerOut is answer for an op's captured output, which may be kept in a
// spool file (runner.Spec.Spool): it is redacted and sealed as a stream.
func (d *Daemon) answerOut(j *job, ev event, rc bridge.Receipt, stdout, stderr runner.Output) error {
	t, ok := lifecycle[ev]
	if !ok || !t.answer {
		panic(fmt.Sprintf("bridge: internal error: %s does not answer", ev))
	}
	if !slices.Contains(t.to, statusState[rc.Status]) {
		panic(fmt.Sprintf("bridge: internal error: %s cannot answer %s", ev, rc.Status))
	}
	cur, err := d.ledger.Get(j.key)
	if err != nil {
		d.log.Error("ledger read", "key", j.key, "err", err)
		return err
	}
	if slices.Contains(unstarted, cur.State) && d.holdBehind(j, cur) {
		// The ledger is behind what this host did with the request (a
		// restored backup): the result it signed then, or uncertain,
		// stands; no answer of today's replaces it.
		return fmt.Errorf("%s: %w", ev, errBehind)
	}
	if st := statusState[rc.Status]; ranBefore(cur) && (slices.Contains(unstarted, cur.State) || ev == evStartFailed) && st != ledger.StateUncertain {
		// A human's rerun (or a crash's re-run) of a request that ran
		// before, refused before it started again (expired, revoked,
		// cancelled, its files gone, its program no longer starts): the
		// answer cannot say it never ran.
		ev, t = evRerunRefused, lifecycle[evRerunRefused]
		rc.Detail = fmt.Sprintf("a human asked to run it again, and it could not start (%s: %s); it ran before and may or may not have had its effect",
			rc.Reason, rc.Detail)
		rc.Status, rc.Reason = bridge.StatusUncertain, bridge.ReasonRerunRefused
	}
	if cur.State == stateNone || !slices.Contains(t.from, cur.State) {
		// Nothing was published: the request stays as the ledger has it
		// (an answer moves an entry; only create makes one).
		d.refusedStep(j.key, ev, cur.State)
		return fmt.Errorf("%s from %s: %w", ev, cur.State, errLifecycle)
	}
	d.probe.Event(string(ev))
	if rc.PolicySHA256 == "" && d.rules() != nil {
		rc.PolicySHA256 = d.pol().SHA256
	}
	stdout, stderr, err = d.redactorFor(j).redactResult(&rc, stdout, stderr)
	if err != nil {
		d.log.Error("read output", "key", j.key, "err", err)
		return err
	}
	resSHA, status, err := d.out.publishResult(j, rc, stdout, stderr)
	if err != nil {
		// The entry stays where it is; the next evaluation publishes the
		// sealed copies (adopt) or tries again.
		d.log.Error("publish result", "key", j.key, "err", err)
		return err
	}
	adopted := status != rc.Status
	rc.Status = status
	return d.record(j, ev, cur.State, resSHA, rc, adopted)
}

// record moves the entry to the state of a result that is published, from
// the state the caller saw (it owns the key). A result an earlier attempt
// sealed (adopted) that the ledger cannot reach from there means the ledger
// is behind what the host did (restored from a backup): the entry goes
// through uncertain (record-lost) to the result's state (catch-up), or
// stays uncertain where even that is not a way. Any other refusal now is a
// broken invariant.
func (d *Daemon) record(j *job, ev event, from ledger.State, resSHA string, rc bridge.Receipt, adopted bool) error {
	to := statusState[rc.Status]
	if adopted && !ledger.CanTransition(from, to) && ledger.CanTransition(from, ledger.StateUncertain) {
		d.log.Warn("the ledger is behind a result this host signed: recording that result", "key", j.key, "state", from, "result", rc.Status)
		d.audit.log(AuditEvent{Event: "record-lost", Agent: j.agent, ID: j.req.ID, Detail: fmt.Sprintf("ledger %s, sealed result %s", from, rc.Status)})
		d.probe.Event(string(evRecordLost))
		if !ledger.CanTransition(ledger.StateUncertain, to) {
			ev, to, rc.Reason = evRecordLost, ledger.StateUncertain, bridge.ReasonRecordLost
		} else {
			// A crash between the two steps leaves it uncertain: held, as
			// where no result says more.
			if _, err := d.ledger.Transition(j.key, []ledger.State{from}, ledger.StateUncertain, func(e *ledger.Entry) {
				e.ResultSHA256, e.Reason = resSHA, string(bridge.ReasonRecordLost)
			}); err != nil {
				return d.violation(j.key, evRecordLost, fmt.Errorf("a %s result is published, and the ledger refused to hold it: %w", rc.Status, err))
			}
			from, ev, rc.Reason = ledger.StateUncertain, evCatchUp, bridge.ReasonRecordLost
			d.probe.Event(string(ev))
		}
	}
	if !ledger.CanTransition(from, to) {
		return d.violation(j.key, ev, fmt.Errorf("a %s result is published, and the ledger cannot go from %s to %s", rc.Status, from, to))
	}
	if cur, err := d.ledger.Transition(j.key, []ledger.State{from}, to, func(e *ledger.Entry) {
		e.ResultSHA256, e.Reason, e.Exit = resSHA, string(rc.Reason), nil
		if rc.Status == bridge.StatusDone {
			code := rc.ExitCode
			e.Exit = &code
		}
		if rc.Op != "" {
			e.Op = rc.Op
		}
	}); errors.Is(err, ledger.ErrWrongState) && cur.State.Answered() && cur.ResultSHA256 == resSHA {
		return nil // this very result was recorded meanwhile (one id has one result)
	} else if err != nil {
		return d.violation(j.key, ev, fmt.Errorf("a %s result is published, and the ledger refused to record it: %w", rc.Status, err))
	}
	d.out.keptDurable(j.key)
	d.markFinished(j.agent, j.req.ID)
	line := AuditEvent{Event: "result", Agent: j.agent, ID: j.req.ID, Op: rc.Op, Status: rc.Status, Reason: string(rc.Reason), Detail: rc.Detail}
	if rc.Status == bridge.StatusDone {
		code := rc.ExitCode
		line.Exit = &code
	}
	d.audit.log(line)
	attrs := []any{"agent", j.keys.name, "id", j.req.ID, "op", rc.Op, "status", rc.Status, "reason", rc.Reason}
	if rc.Status == bridge.StatusDone {
		attrs = append(attrs, "exit", rc.ExitCode) // nothing ran otherwise: no exit code to tell
	}
	d.log.Info("result", attrs...)
	d.crashPoint("recorded")
	return nil
}

// adopt publishes a result an earlier attempt sealed but did not record (a
// crash or a failed publish between the two), and records it. It reports
// whether there was one.
func (d *Daemon) adopt(j *job, cur ledger.Entry) bool {
	if !d.out.hasSealedResult(j.agent, j.req.ID) {
		return false
	}
	resSHA, status, err := d.out.publishResult(j, bridge.Receipt{}, runner.Output{}, runner.Output{})
	if err != nil {
		d.log.Error("publish the sealed result", "key", j.key, "err", err)
		return true // it is there; the next evaluation tries again
	}
	d.log.Info("adopting the sealed result", "key", j.key, "status", status)
	d.probe.Event(string(evAdopt))
	d.record(j, evAdopt, cur.State, resSHA, bridge.Receipt{Status: status, Op: cur.Op, Reason: bridge.ReasonCode(cur.Reason)}, true)
	return true
}

// refusedStep reports an event the table does not allow from the entry's
// state. Nothing was published or changed; the next evaluation looks again.
func (d *Daemon) refusedStep(key string, ev event, st ledger.State) {
	if d.firstTime(fmt.Sprintf("step:%s:%s:%s", key, ev, st)) {
		d.log.Error("lifecycle: step refused before any effect", "key", key, "event", ev, "state", st)
		d.audit.log(AuditEvent{Event: "step-refused", Detail: fmt.Sprintf("%s: %s from %s", key, ev, st)})
	}
}

// violation stops the daemon: a result is out and the ledger does not say
// so. Going on would leave an answered request that a restart could run
// again; stopping leaves recovery (which adopts the published result) to
// the next start, and the operator a clear line in the log and audit log.
func (d *Daemon) violation(key string, ev event, err error) error {
	d.log.Error("lifecycle violation: stopping", "key", key, "event", ev, "err", err)
	d.audit.log(AuditEvent{Event: "violation", Detail: fmt.Sprintf("%s: %s: %v", key, ev, err)})
	err = fmt.Errorf("serve: request %s: %s: %w: %w", key, ev, errViolation, err)
	d.fatal(bridge.WithHint(err, "start `bridge serve` again: it adopts the published result; if this repeats, run `bridge doctor` and keep the audit log"))
	return err
}

// ranBefore reports whether a request may have run before the attempt at
// hand: it counted a run (a running entry counts its own start, which is
// not "before"), or it was uncertain (a human asked to run it again; a
// request whose record was lost counts no runs).
func ranBefore(e ledger.Entry) bool {
	runs := e.Runs
	if e.State == ledger.StateRunning {
		runs--
	}
	return runs > 0 || slices.ContainsFunc(e.History, func(t ledger.Transition) bool { return t.State == ledger.StateUncertain })
}
