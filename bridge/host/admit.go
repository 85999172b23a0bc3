package host

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
	"github.com/syncbridge/bridge/bridge/trust"
)

// The back of the host pipeline: admit decrypts a settled request and
// applies the policy, claims it and hands it to run, which starts the op
// and answers how it ended. Each state change is a lifecycle event
// (lifecycle.go).

// admitMode says why a request is admitted.
type admitMode int

const (
	admitNew       admitMode = iota // first evaluation
	admitResume                     // crash recovery re-runs an idempotent op that was running
	admitReconcile                  // crash recovery asks the op's reconcile command what happened
	admitApproved                   // a human approved a request that waited for approval
)

// crashed reports whether the mode is a recovery of an op that was running:
// the op may have had its effect, so a refusal now cannot say it did not.
func (m admitMode) crashed() bool { return m == admitResume || m == admitReconcile }

// admit decrypts the spooled payload, applies the policy, claims the id and
// hands it to a run goroutine (it reports whether it did).
func (d *Daemon) admit(j *job, in spool, mode admitMode) bool {
	defer in.Close()
	// refuse answers a request that will not run. Before it started that
	// is the event given; after a crash interrupted it, the op may have had
	// its effect, so whatever keeps it from running again leaves it
	// uncertain.
	refuse := func(ev event, rc bridge.Receipt) bool {
		if mode.crashed() {
			ev = evCrashUnsure
			rc.Status, rc.Reason = bridge.StatusUncertain, bridge.ReasonCrashed
			rc.Detail = "the host stopped while the op ran, and it cannot be run or checked again now (" + rc.Detail +
				"); it may or may not have had its effect. A human on the host resolves it with `bridge reconcile`"
		}
		d.answer(j, ev, rc, nil, nil)
		return false
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		d.log.Error("read spool", "err", err)
		return false
	}
	stdin, err := newSpool(d.home.Path("spool"), j.req.ID, "stdin", j.req.Payload.Len)
	if err != nil {
		d.log.Error("spool stdin", "err", err)
		return false
	}
	handed := false
	defer func() {
		if !handed {
			stdin.Close()
		}
	}()
	me := d.own().byBoxKid(j.req.HostBoxKid)
	if me == nil {
		return refuse(evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: "unknown-key", Detail: "sealed to a host key this host no longer keeps"})
	}
	// The op's own max_stdin, checked on the exact length before any of
	// the input is copied; the built-in ping takes none.
	counted := &countingWriter{w: stdin}
	maxStdin := func(op string) int64 {
		if op == bridge.PingOp {
			return 0
		}
		if j.rules.p.Approves(op) {
			// A human approves what they were shown: the input too, by
			// its size and hash (issue 26: it was not shown at all).
			counted.h = sha256.New()
		}
		return j.rules.p.MaxStdin(j.keys.name, op)
	}
	call, err := bridge.OpenCall(in, j.req, me, counted, maxStdin)
	if err != nil {
		return refuse(evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Detail: err.Error()})
	}
	j.args = call.Args
	if err := d.standing(j); err != nil {
		return refuse(evRevoke, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Op: call.Op, Detail: err.Error()})
	}
	if call.Op == bridge.PingOp && mode == admitNew {
		return d.ping(j)
	}
	inv, err := j.rules.p.Render(j.keys.name, call.Op, call.Args, policy.RenderContext{Env: d.opt.Env, Vars: map[string]string{"request_id": j.req.ID}})
	if err != nil {
		rc := bridge.Receipt{Status: bridge.StatusRejected, Op: call.Op, Detail: err.Error(), PolicySHA256: j.rules.p.SHA256}
		ev := evRefuse
		switch {
		case errors.Is(err, policy.ErrNotAllowed), errors.Is(err, policy.ErrUnknownOp):
			rc.Reason = "not-allowed"
		case errors.Is(err, policy.ErrInvalidArg):
			rc.Reason = "bad-argument"
		default:
			ev, rc.Status, rc.Reason = evHostError, bridge.StatusFailed, "host-error"
		}
		return refuse(ev, rc)
	}
	if counted.n == 0 && j.rules.p.StdinMode(call.Op) == policy.StdinRequired {
		return refuse(evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.ReasonBadArgument, Op: call.Op, PolicySHA256: j.rules.p.SHA256,
			Detail: "op " + call.Op + " needs standard input and the request carried none"})
	}
	// The synced folder is never a source of code or a working directory:
	// anything in it may have been written by anyone who can write the folder.
	for _, p := range []string{inv.Argv[0], inv.Dir} {
		if trust.InsideDir(p, d.home.Config.Folder) {
			return refuse(evHostError, bridge.Receipt{Status: bridge.StatusFailed, Reason: bridge.ReasonHostError, Op: inv.Op,
				Detail: "the op would run code or work inside the synced folder (" + p + "); the host refuses"})
		}
	}
	inv.SetRequestEnv(j.req.ID)
	if inv.Approve && counted.h != nil {
		inv.Stdin = "none"
		if counted.n > 0 {
			inv.Stdin = fmt.Sprintf("%d bytes, sha256 %x", counted.n, counted.h.Sum(nil))
		}
	}
	if mode == admitApproved && !d.policy.approvedAsShown(j, inv) {
		return refuse(evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: ReasonApprovalMismatch, Op: inv.Op, PolicySHA256: j.rules.p.SHA256,
			Detail: "what it would run now differs from what the human approved (the policy, a path argument's target or the program's location changed since): nothing ran; send it again to ask again"})
	}
	if inv.Approve && mode == admitNew {
		return d.awaitApproval(j, inv, stdin, counted.n)
	}
	if mode == admitReconcile {
		handed = true
		d.wg.Add(1)
		d.mu.Lock()
		d.checks[j.key] = true // a drain waits for it as for a run (Close)
		d.mu.Unlock()
		go d.reconcileCheck(j, inv, stdin)
		return true
	}
	ceilingDone, queueDone := func() {}, func() {}
	if mode == admitNew {
		// Not for an approved request: a human's decision must not wait
		// for a rescan.
		var ok bool
		if queueDone, ok = d.sched.reserveQueue(inv.Op, inv.Concurrency, j.key); !ok {
			d.log.Debug("op full: evaluated again when a run of it ends", "key", j.key, "op", inv.Op)
			return false
		}
	}
	if mode == admitNew || mode == admitApproved {
		var over *bridge.Receipt
		if ceilingDone, over = d.sched.ceil.reserve(j.keys.name, inv); over != nil {
			queueDone()
			return refuse(evRefuse, *over)
		}
		ev := evClaim
		if mode == admitApproved {
			ev = evApprove
		}
		if _, err := d.step(j.key, ev, func(e *ledger.Entry) { e.Op, e.Idempotent = inv.Op, inv.Idempotent }); err != nil {
			ceilingDone()
			queueDone()
			d.log.Warn("claim", "key", j.key, "err", err)
			return false
		}
		d.audit.log(AuditEvent{Event: "claimed", Agent: j.agent, ID: j.req.ID, Op: inv.Op})
		d.crashPoint("claimed")
	}
	handed = true
	d.wg.Add(1)
	// The ceiling first: the deferred request queueDone schedules must
	// find this run's place in max_concurrent free. Both before the run's
	// WaitGroup slot is given back: whoever waits for the daemon to be idle
	// must also wait for the evaluation queueDone starts.
	go d.run(j, inv, stdin, mode == admitResume, func() { ceilingDone(); queueDone() })
	return true
}

// standing reports why a request's signing key may no longer start
// anything (an error that names neither the request nor, in the agent's
// answer, repeats its id): it is read fresh from the home, so a revocation counts from the
// moment `bridge keys revoke` returned, not from the daemon's next reload
// of its peers (a stat of one file when nothing changed).
func (d *Daemon) standing(j *job) error {
	p, err := d.home.PeerByID(j.agent)
	if err != nil {
		return fmt.Errorf("%w: the agent is no longer trusted (%v)", bridge.ErrKeyRevoked, err)
	}
	for _, k := range p.Keys {
		if k.SignKid() == j.req.AgentKid && p.State(k, d.opt.Now()) == trust.KeyRevoked {
			return fmt.Errorf("%w: key %s of %s was revoked on this host", bridge.ErrKeyRevoked, k.SignKid(), p.Name)
		}
	}
	return nil
}

// reconcileCheck runs an op's reconcile command after a crash left the op
// running (invariant 5, DESIGN §5): exit 0 means the effect happened (done,
// with the check's output); exit 3 means it did not (run the op now, once);
// anything else leaves the request uncertain for a human.
func (d *Daemon) reconcileCheck(j *job, inv *policy.Invocation, stdin spool) {
	defer func() {
		d.mu.Lock()
		delete(d.checks, j.key) // gone already if it handed a run on
		d.mu.Unlock()
	}()
	handed := false
	defer func() {
		if !handed {
			stdin.Close()
			d.sched.release(j.key)
			d.wg.Done()
		}
	}()
	unsure := func(detail string) {
		d.answerOrRetry(j, evCrashUnsure, bridge.Receipt{Status: bridge.StatusUncertain, Reason: bridge.ReasonCrashed, Op: inv.Op, Detail: detail}, nil, nil)
	}
	if len(inv.Reconcile) == 0 {
		unsure("the host stopped while the op ran; it may or may not have had its effect. A human on the host resolves it with `bridge reconcile`")
		return
	}
	d.audit.log(AuditEvent{Event: "reconcile-check", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: strings.Join(inv.Reconcile, " ")})
	out := d.runs.Run(d.runCtx, runner.Spec{Argv: inv.Reconcile, Dir: inv.Dir, Env: inv.Env, Timeout: inv.Timeout,
		MaxOutput: inv.MaxOutput, Grace: d.opt.Grace, Spool: d.home.Path("spool")})
	defer out.Stdout.Close() // answerOrRetryOut closes them too; the other answers do not use them
	defer out.Stderr.Close()
	clean := out.StartErr == nil && !out.TimedOut && !out.Cancelled
	switch {
	case d.runCtx.Err() != nil:
		// The daemon is stopping: the next start asks again.
		d.log.Info("reconcile check stopped by the shutdown: left for the next start", "key", j.key)
	case clean && out.ExitCode == 0:
		d.answerOrRetryOut(j, evCrashDone, bridge.Receipt{Status: bridge.StatusDone, Reason: bridge.ReasonReconciled, Op: inv.Op, Argv: inv.Reconcile,
			PolicySHA256: j.rules.p.SHA256, Started: out.Started.UnixMilli(), Finished: out.Finished.UnixMilli(),
			StdoutTotal: out.Stdout.Total, StdoutTruncated: out.Stdout.Truncated, StderrTotal: out.Stderr.Total, StderrTruncated: out.Stderr.Truncated,
			Detail: "the host stopped while the op ran; its reconcile command reports the effect happened, so it was not run again"},
			out.Stdout, out.Stderr)
	case clean && out.ExitCode == 3:
		d.log.Info("reconcile: the op had no effect; running it now", "key", j.key, "op", inv.Op)
		handed = true
		d.run(j, inv, stdin, true, nil) // owns the key, stdin and the WaitGroup slot from here
	default:
		detail := fmt.Sprintf("exit %d", out.ExitCode)
		if out.StartErr != nil {
			detail = out.StartErr.Error()
		}
		unsure("the host stopped while the op ran, and its reconcile command could not tell (" + detail + "). A human on the host resolves it with `bridge reconcile`")
	}
}

// resumeCancelled is the answer to a run a crash interrupted whose agent
// cancelled it before it could run again: it ran before, so it is
// uncertain (DESIGN §6: a request that ran is never answered cancelled when
// its re-run is refused), retried as the other answers of a resumed run.
func resumeCancelled(op string) bridge.Receipt {
	return bridge.Receipt{Status: bridge.StatusUncertain, Reason: bridge.ReasonCrashed, Op: op,
		Detail: "the host stopped while the op ran, and it was cancelled before it could run again; it may or may not have had its effect"}
}

// run waits for a slot of the op's concurrency, then runs it and answers.
// It owns the key (releases it) and the stdin spool file. resume: a crash
// left the entry running, and the op is run again (it is retry-safe, or
// its reconcile command said it had no effect).
func (d *Daemon) run(j *job, inv *policy.Invocation, stdin spool, resume bool, after func()) {
	defer d.wg.Done()
	if after != nil {
		defer after() // once the key is released, before the slot
	}
	defer d.sched.release(j.key)
	defer stdin.Close()
	// The cancel function is registered before the last cancel check, so a
	// cancel arriving at any moment from here on reaches the run.
	ctx, cancel := context.WithCancel(d.runCtx)
	defer cancel()
	d.mu.Lock()
	d.cancels[j.key] = cancel
	delete(d.checks, j.key) // a reconcile check's run: counted as a run from here, never as neither (Close)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.cancels, j.key)
		d.mu.Unlock()
	}()
	d.mu.Lock()
	d.slotWait[j.key] = j // a revocation stops the wait at once (revokeWaiting)
	d.mu.Unlock()
	slot, expired := d.waitSlot(ctx, j, inv, resume)
	d.mu.Lock()
	delete(d.slotWait, j.key)
	d.mu.Unlock()
	if expired {
		return
	}
	if slot == nil {
		if d.runCtx.Err() != nil {
			return // shutting down while still queued: claimed, never started; the next start evaluates it again
		}
		if err := d.standing(j); err != nil && !resume {
			d.answer(j, evRevoke, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Op: inv.Op, Detail: err.Error()}, nil, nil)
			return
		}
		if !resume {
			d.answer(j, evCancelEarly, bridge.Receipt{Status: bridge.StatusCancelled, Reason: bridge.ReasonCancelled, Op: inv.Op, Detail: "cancelled before it ran"}, nil, nil)
			return
		}
		d.answerOrRetry(j, evCrashUnsure, resumeCancelled(inv.Op), nil, nil)
		return
	}
	freeSlot := sync.OnceFunc(slot)
	defer freeSlot()
	if d.closing.Load() || d.runCtx.Err() != nil {
		// The daemon is stopping (or a second signal came while it
		// started up, before Close): nothing starts any more. A request that
		// waited for its slot never started (claimed: the next start
		// evaluates it again); a crash re-run stays running for the next
		// start's recovery, as it was.
		d.log.Info("stopping: a request that waited for its slot is left for the next start", "key", j.key)
		return
	}
	// Right before the start: what may have changed while it waited.
	if err := d.standing(j); err != nil {
		if resume {
			d.answerOrRetry(j, evCrashUnsure, bridge.Receipt{Status: bridge.StatusUncertain, Reason: bridge.ReasonCrashed, Op: inv.Op,
				Detail: "the host stopped while the op ran, and its key was revoked since, so it is not run again: " + err.Error()}, nil, nil)
		} else {
			d.answer(j, evRevoke, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Op: inv.Op, Detail: err.Error()}, nil, nil)
		}
		return
	}
	if resume && d.cancelled(j.agent, j.req.ID) {
		// Cancelled while the host was down: the interrupted run is not
		// run again (read here, not at the next rescan, after the
		// re-run had started). It ran before, so it stays uncertain, as
		// when the cancel comes while it waits for its slot (DESIGN §6).
		d.answerOrRetry(j, evCrashUnsure, resumeCancelled(inv.Op), nil, nil)
		return
	}
	if !resume {
		if ent, err := d.ledger.Get(j.key); err == nil && d.expired(j, ent) {
			return
		}
		if d.cancelled(j.agent, j.req.ID) {
			d.answer(j, evCancelEarly, bridge.Receipt{Status: bridge.StatusCancelled, Reason: bridge.ReasonCancelled, Op: inv.Op, Detail: "cancelled before it ran"}, nil, nil)
			return
		}
		if err := d.policy.stillAsAdmitted(j, inv); err != nil {
			d.answer(j, evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: ReasonPolicyChanged, Op: inv.Op, PolicySHA256: d.pol().SHA256,
				Detail: err.Error() + "; nothing ran: send it again to have the new policy judge it"}, nil, nil)
			return
		}
	}
	ev := evStart
	if resume {
		ev = evCrashRerun
	}
	if d.runCtx.Err() != nil {
		return // aborted while it was checked: left as it was, as above
	}
	// Ledger before effect (invariant 3): running is durable before the
	// process exists.
	if _, err := d.step(j.key, ev, nil); err != nil {
		d.log.Error("ledger", "key", j.key, "err", err)
		return
	}
	d.crashPoint("running")
	// No input: the program gets /dev/null rather than an empty pipe (the
	// same EOF, without a pipe and a copy for every run).
	var in io.Reader = stdin
	if n, err := stdin.Seek(0, io.SeekEnd); err == nil && n == 0 {
		in = nil
	} else if _, err := stdin.Seek(0, io.SeekStart); err != nil {
		d.log.Error("spool stdin", "err", err)
		return
	}
	d.audit.log(AuditEvent{Event: "run", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: policy.QuoteArgv(inv.Argv)})
	prog := d.out.newProgress(j)
	progStop, progDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(progDone); prog.loop(progStop) }()
	onOutput := prog.write
	if d.probe.Crashing("mid-run") {
		// The crash test's step: at the op's first output, when it surely
		// runs (a counted event; a time after the start is one a loaded
		// machine can outrun).
		onOutput = func(stream int, p []byte) { d.crashPoint("mid-run"); prog.write(stream, p) }
	}
	out := d.runs.Run(ctx, runner.Spec{
		Argv: inv.Argv, Dir: inv.Dir, Env: inv.Env, Stdin: in, Timeout: inv.Timeout,
		MaxOutput: inv.MaxOutput, Grace: d.opt.Grace, Limits: runnerLimits(inv.Limits),
		OnOutput: onOutput, Spool: d.home.Path("spool"), // the output is never held in memory whole
	})
	defer out.Stdout.Close() // answerOrRetryOut closes them too; a run left for the next start does not answer
	defer out.Stderr.Close()
	for _, n := range out.Notes {
		if strings.HasPrefix(n, "op containment") {
			d.log.Warn(n, "key", j.key, "hint", "see `bridge doctor` (containment)")
		}
	}
	close(progStop)
	<-progDone
	prog.final()
	d.sched.ceil.chargeCPU(j.keys.name, out.CPU)
	rc := bridge.Receipt{
		Status: bridge.StatusDone, Op: inv.Op, Argv: inv.Argv, PolicySHA256: j.rules.p.SHA256,
		ExitCode: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut,
		Started: out.Started.UnixMilli(), Finished: out.Finished.UnixMilli(),
		StdoutTotal: out.Stdout.Total, StdoutTruncated: out.Stdout.Truncated,
		StderrTotal: out.Stderr.Total, StderrTruncated: out.Stderr.Truncated,
	}
	// The signed result commits to the progress chunks published meanwhile.
	rc.ProgressCount, rc.ProgressHead = prog.head()
	ev = evExit
	if d.killed.Load() && (out.StartErr == nil || resume) {
		// A second signal (Abort) came: whatever ended this run (its kill,
		// which the runner may report as an exit of its own when the
		// SIGKILL and the cancel land together, or its own end at that
		// moment), the process is exiting, and the next start settles the
		// entry as after a crash (red team of 89cc37a). So is a crash
		// re-run the abort refused to start: its entry was running already.
		return
	}
	switch shutdown := d.runCtx.Err() != nil; {
	case errors.Is(out.StartErr, runner.ErrMayHaveStarted):
		// The runner lost track of the start (the op's keeper was killed
		// or stopped by something at that moment): the program may have
		// run. Never "could not start", which a client would retry.
		ev, rc.Status, rc.Reason = evCrashUnsure, bridge.StatusUncertain, bridge.ReasonCrashed
		rc.Detail = out.StartErr.Error() + "; it may or may not have had its effect. A human on the host resolves it with `bridge reconcile`"
	case out.StartErr != nil:
		// The process never started: "failed" is true, and a retry safe.
		ev, rc.Status, rc.Reason, rc.Detail = evStartFailed, bridge.StatusFailed, bridge.ReasonStartFailed, out.StartErr.Error()
		if shutdown {
			rc.Reason, rc.Detail = bridge.ReasonHostShutdown, "the host daemon stopped before the op started"
		}
	case out.Cancelled && shutdown:
		// Stopped by the signal ladder after the drain deadline: it ran,
		// so it did not "fail to start". A retry-safe op, or one that can
		// check itself, is left running for the next start's recovery; so
		// is every op a second signal killed (Abort), above. (One aborted
		// before its running step is left as it was; a new one aborted
		// between that step and its exec is answered failed, since nothing
		// ran, maybe not durably before the exit.)
		if inv.Idempotent || len(inv.Reconcile) > 0 {
			d.log.Warn("op stopped by the shutdown: the next start runs it again or checks it", "key", j.key, "op", inv.Op)
			d.audit.log(AuditEvent{Event: "interrupted", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: "stopped by the shutdown; left for the next start"})
			return
		}
		ev, rc.Status, rc.Reason = evDrainAbort, bridge.StatusUncertain, bridge.ReasonHostShutdown
		rc.Detail = "the host daemon was stopped while the op ran, and it was killed after the drain; it may or may not have had its effect. A human on the host resolves it with `bridge reconcile`"
	case out.Cancelled:
		ev, rc.Status, rc.Reason = evCancelRun, bridge.StatusCancelled, bridge.ReasonCancelled
		rc.Detail = "the agent cancelled it while it ran; it was stopped (it may have had part of its effect)"
	case out.TimedOut:
		rc.Reason, rc.Detail = bridge.ReasonTimeout, fmt.Sprintf("timed out after %s", inv.Timeout)
	}
	if len(out.Notes) > 0 && rc.Detail == "" {
		rc.Detail = strings.Join(out.Notes, "; ")
	}
	// The op's slot is held until its answer is recorded (so no more
	// entries than its concurrency are ever running), unless publishing
	// fails: then the next request for the op must not wait on it.
	d.answerOrRetryOut(j, ev, rc, out.Stdout, out.Stderr, freeSlot)
}

// answerOrRetry answers an op that ran (or was checked), trying again with
// a backoff while the publish fails (a full disk, a folder being
// remounted): the outcome is known only here, and a restart would have to
// call it uncertain. It gives up when the daemon aborts; the entry then
// stays running, for the next start's recovery.
func (d *Daemon) answerOrRetry(j *job, ev event, rc bridge.Receipt, stdout, stderr []byte, onRetry ...func()) {
	d.answerOrRetryOut(j, ev, rc, runner.Output{Data: stdout}, runner.Output{Data: stderr}, onRetry...)
}

// answerOrRetryOut is answerOrRetry for an op's captured output, which it
// releases once answered (a spooled output's file).
func (d *Daemon) answerOrRetryOut(j *job, ev event, rc bridge.Receipt, stdout, stderr runner.Output, onRetry ...func()) {
	defer stdout.Close()
	defer stderr.Close()
	b := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(30*time.Second), backoff.WithMaxElapsedTime(0)), d.runCtx)
	_ = backoff.RetryNotify(func() error {
		err := d.answerOut(j, ev, rc, stdout, stderr)
		if err == nil || errors.Is(err, errLifecycle) || errors.Is(err, errBehind) || errors.Is(err, errViolation) || d.stopped() {
			return backoff.Permanent(err)
		}
		return err
	}, b, func(err error, wait time.Duration) {
		d.log.Warn("answer: trying again", "key", j.key, "event", ev, "in", wait.Round(time.Millisecond), "err", err)
		for _, f := range onRetry {
			f()
		}
	})
}

// waitSlot waits for a slot of the op (acquire) until ctx ends, and no
// longer than the request may wait: its signed expiry or MaxQueueAge after
// it was first seen, whichever comes first. At that deadline it answers
// the request as expired and reports so, while the op ahead of it may
// still run (without the deadline the agent would wait as long as that op
// runs, to learn the request had been too old for a while). A crash
// re-run (resume) was started before and waits without a deadline.
func (d *Daemon) waitSlot(ctx context.Context, j *job, inv *policy.Invocation, resume bool) (slot func(), expired bool) {
	if resume || inv.Concurrency <= 0 {
		return d.sched.acquire(ctx, inv.Op, inv.Concurrency), false
	}
	ent, err := d.ledger.Get(j.key)
	if err != nil {
		return d.sched.acquire(ctx, inv.Op, inv.Concurrency), false
	}
	deadline := ent.FirstSeen.Add(d.opt.MaxQueueAge)
	if exp := time.Unix(j.req.Expires, 0); exp.Before(deadline) {
		deadline = exp
	}
	for {
		// A millisecond past the deadline: expired's checks are strict.
		wait, stop := context.WithTimeout(ctx, deadline.Sub(d.opt.Now())+time.Millisecond)
		slot = d.sched.acquire(wait, inv.Op, inv.Concurrency)
		stop()
		if slot != nil || ctx.Err() != nil {
			return slot, false
		}
		ent, err := d.ledger.Get(j.key)
		if err != nil {
			return d.sched.acquire(ctx, inv.Op, inv.Concurrency), false
		}
		if d.expired(j, ent) {
			return nil, true
		}
		// The wall clock stepped back since the wait began: wait again
		// for the deadline as it reads now.
	}
}

// acquire takes a slot of op's concurrency limit (0 = unlimited); nil if
// ctx ended first. The count of runs holding a slot is kept across policy
// reloads: a limit lowered while runs hold their slots lets nothing more
// start until enough of them end, and a limit raised frees the waiters
// it allows at once.
func (s *scheduler) acquire(ctx context.Context, op string, limit int) func() {
	s.mu.Lock()
	// The limit in force now, not the one the request was admitted under:
	// a request evaluated across a reload must not bring an old limit back.
	// Read under the lock: a reload swaps the policy in before relimit takes
	// it, so whichever comes second sets the new limit (red team of the
	// rooms: read before, a relimit in between was overwritten).
	if r := s.rules(); r != nil {
		if c, ok := r.p.Concurrency(op); ok {
			limit = c
		}
	}
	o := s.slots[op]
	if o == nil {
		o = &opSlots{}
		s.slots[op] = o
	}
	// Runs are counted when there is no limit too, so that a limit a
	// reload sets counts the runs going already.
	o.limit = limit
	if limit <= 0 {
		o.limit = math.MaxInt
	}
	if o.busy < o.limit && len(o.waiters) == 0 {
		o.busy++
		s.mu.Unlock()
		return s.slotRelease(o)
	}
	ready := make(chan struct{})
	o.waiters = append(o.waiters, ready)
	s.grantSlots(o)
	s.mu.Unlock()
	select {
	case <-ready:
		return s.slotRelease(o)
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-ready: // granted as the context ended: give it back
			o.busy--
			s.grantSlots(o)
		default:
			o.waiters = slices.DeleteFunc(o.waiters, func(c chan struct{}) bool { return c == ready })
		}
		return nil
	}
}

// opSlots counts an op's runs against its concurrency limit; waiters are
// served first come, first served.
type opSlots struct {
	busy, limit int
	waiters     []chan struct{}
}

// grantSlots hands free slots to waiters in order. s.mu is held.
func (s *scheduler) grantSlots(o *opSlots) {
	for o.busy < o.limit && len(o.waiters) > 0 {
		o.busy++
		close(o.waiters[0])
		o.waiters = o.waiters[1:]
	}
}

func (s *scheduler) slotRelease(o *opSlots) func() {
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		o.busy--
		s.grantSlots(o)
	}
}

// ping answers the built-in no-op: claimed, running and done like any op, so
// it measures the whole pipeline except the process start. It counts
// against the agent's ceilings like any op: a ping is a request the host
// verifies, decrypts, records and answers, and an agent at its ceiling must
// not be able to make the host do that without bound.
func (d *Daemon) ping(j *job) bool {
	release, over := d.sched.ceil.reserve(j.keys.name, &policy.Invocation{Op: bridge.PingOp})
	if over != nil {
		d.answer(j, evRefuse, *over, nil, nil)
		return false
	}
	defer release()
	if _, err := d.step(j.key, evClaim, func(e *ledger.Entry) { e.Op, e.Idempotent = bridge.PingOp, true }); err != nil {
		return false
	}
	if _, err := d.step(j.key, evStart, nil); err != nil {
		return false
	}
	now := d.opt.Now().UnixMilli()
	d.answer(j, evExit, bridge.Receipt{Status: bridge.StatusDone, Op: bridge.PingOp, Started: now, Finished: now, StdoutTotal: 5}, []byte("pong\n"), nil)
	return false
}

// revokeWaiting stops the wait of every request waiting for its op's slot
// whose signing key is no longer in standing (the trusted peers changed):
// it is answered rejected (revoked) now, not when the slot frees.
func (d *Daemon) revokeWaiting() {
	d.mu.Lock()
	waiting := slices.Collect(maps.Values(d.slotWait))
	d.mu.Unlock()
	for _, j := range waiting {
		if d.standing(j) == nil {
			continue
		}
		d.mu.Lock()
		cancel := d.cancels[j.key]
		d.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
}

// countingWriter counts what passes through it: the exact length of a
// request's standard input.
type countingWriter struct {
	w io.Writer
	n int64
	h hash.Hash // if set, hashes what is written
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.h != nil {
		c.h.Write(p[:n])
	}
	return n, err
}
