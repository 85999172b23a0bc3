package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"

	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// This file is the host pipeline of SPEC §8: evaluate (verify, admit,
// settle), admit (decrypt, policy, claim), run, and finish (publish the
// result, then record the final state).

// schedule queues a request for evaluation. A request that changes while it
// is being evaluated or run is evaluated once more afterwards.
func (d *Daemon) schedule(agent, id string) {
	key := agent + "/" + id
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closing:
	case d.active[key]:
		d.dirty[key] = true
	case !d.queued[key]:
		d.queued[key] = true
		d.queue = append(d.queue, key)
		d.cond.Signal()
	}
}

// worker evaluates queued keys until the daemon closes.
func (d *Daemon) worker() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && !d.closing {
			d.cond.Wait()
		}
		if d.closing {
			d.mu.Unlock()
			return
		}
		key := d.queue[0]
		d.queue = d.queue[1:]
		delete(d.queued, key)
		d.active[key] = true
		d.mu.Unlock()
		agent, id, _ := strings.Cut(key, "/")
		if !d.evaluate(agent, id) {
			d.release(key)
		}
	}
}

// release ends a key's activity and queues it again if it changed meanwhile.
func (d *Daemon) release(key string) {
	d.mu.Lock()
	delete(d.active, key)
	again := d.dirty[key]
	delete(d.dirty, key)
	d.mu.Unlock()
	if again {
		agent, id, _ := strings.Cut(key, "/")
		d.schedule(agent, id)
	}
}

// job is one authentic request on its way through the pipeline.
type job struct {
	agent    string
	keys     *agentKeys
	req      *bridge.Request
	manifest []byte
	sha      string // of the manifest file
	key      string
}

func (d *Daemon) check(agent string, keys *agentKeys) bridge.RequestCheck {
	return bridge.RequestCheck{
		Host: d.me, HostBoxKids: d.own().boxKids(), Agent: agent, AgentKeys: keys.sign(d.opt.Now()),
		AgentBoxKid: func(kid string) bool { return keys.boxValid(kid, d.opt.Now()) },
		Now:         d.opt.Now(), Skew: d.opt.Skew,
	}
}

// evaluate runs the pipeline for one request id. It is safe to call any
// number of times (invariant 6): the ledger decides what happens. It
// reports whether it handed the key to a run goroutine, which then owns the
// key's release.
func (d *Daemon) evaluate(agent, id string) bool {
	keys := d.agents()[agent]
	if keys == nil {
		return false // trust was withdrawn
	}
	key := agent + "/" + id
	mpath := bridge.RequestPath(d.me, agent, id, bridge.ExtManifest)
	ent, err := d.ledger.Get(key)
	exists := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		d.log.Error("ledger read", "key", key, "err", err)
		return false
	}
	if exists && (ent.State.Terminal() || ent.State == ledger.StateUncertain) {
		// Never run again (invariant 4). An authentic manifest under this id
		// with other content is a forgery or a bug, and is reported.
		if data, err := d.folder.ReadFile(mpath, bcrypto.KindRequest.MaxSize()); err == nil && bridge.SHA256Hex(data) != ent.ManifestSHA256 {
			if req, err := bridge.OpenRequest(data, id, d.check(agent, keys)); req != nil || err == nil {
				d.refuseFile(mpath, fmt.Errorf("%w: %s was recorded with another manifest", bridge.ErrReplay, id))
			} else if !errors.Is(err, bcrypto.ErrTruncated) {
				d.refuseFile(mpath, err)
			}
		}
		d.duplicate(ent)
		return false
	}
	if exists && ent.State == ledger.StateAwaitingApproval {
		return false // a human decides
	}
	if exists && ent.State.InFlight() {
		// The key is ours (active), so nothing in this process is working
		// on it: it was left in flight by a publish that failed. If its
		// result was sealed, publish it now.
		if _, err := os.Stat(d.home.Path("results", agent, id+"."+bridge.ExtResult)); err == nil {
			if j, err := d.reload(ent, keys, true); err == nil {
				d.finish(j, bridge.Receipt{})
			}
		}
		return false
	}
	data, err := d.folder.ReadFile(mpath, bcrypto.KindRequest.MaxSize())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false // the payload came first; the manifest will follow
	case errors.Is(err, syncsafe.ErrTooLarge), errors.Is(err, syncsafe.ErrNotRegular):
		d.refuseFile(mpath, err)
		return false
	case err != nil:
		d.log.Warn("read manifest", "file", mpath, "err", err)
		return false
	}
	j := &job{agent: agent, keys: keys, manifest: data, sha: bridge.SHA256Hex(data), key: key}
	req, verr := bridge.OpenRequest(data, id, d.check(agent, keys))
	if errors.Is(verr, bcrypto.ErrBadSignature) || errors.Is(verr, bcrypto.ErrUnknownKey) {
		req, verr = d.invalidKey(data, id, agent, keys, verr)
	}
	if verr != nil && req == nil {
		if errors.Is(verr, bcrypto.ErrTruncated) {
			d.waiting(mpath, len(data), verr) // may still be arriving
		} else {
			d.refuseFile(mpath, verr)
		}
		return false
	}
	j.req = req
	if exists && ent.ManifestSHA256 != j.sha {
		d.refuseFile(mpath, fmt.Errorf("%w: %s was recorded with another manifest", bridge.ErrReplay, id))
		return false
	}
	expires := recordedExpiry(req)
	if !exists && verr != nil && outsideRecordWindow(req, expires, d.opt.Now(), d.opt.Skew) {
		// Refused, and either past its (effective) expiry beyond the skew
		// or created absurdly far ahead: the ledger may have forgotten the
		// id after it was answered (GC), or would have to keep it for
		// ever. Refuse it without an entry or a result, so it never gets a
		// second one. Whatever the reason it is refused for (a revoked or
		// expired key too), the times decide this.
		if !errors.Is(verr, bridge.ErrExpired) && d.opt.Now().After(expires.Add(d.opt.Skew)) {
			verr = fmt.Errorf("%w (and at %s: %w)", verr, expires.UTC().Format(time.RFC3339), bridge.ErrExpired)
		}
		d.refuseFile(mpath, verr)
		return false
	}
	if !exists {
		// Keep the admitted manifest: recovery and reconcile must not depend
		// on the agent's file still being in the folder.
		if err := d.keepManifest(j); err != nil {
			d.log.Error("keep manifest", "key", key, "err", err)
			return false
		}
		ent, _, err = d.ledger.Admit(ledger.Entry{Key: key, Agent: agent, ID: id, State: ledger.StateSeen, ManifestSHA256: j.sha,
			FirstSeen: d.opt.Now(), Expires: expires})
		if errors.Is(err, ledger.ErrConflict) {
			d.refuseFile(mpath, fmt.Errorf("%w: %s", bridge.ErrReplay, id))
			return false
		} else if err != nil {
			d.log.Error("ledger admit", "key", key, "err", err)
			return false
		}
		if ent.State.Terminal() {
			d.duplicate(ent)
			return false
		}
		d.audit.log(AuditEvent{Event: "seen", Agent: agent, ID: id})
	}
	if verr != nil { // authentic but refused for its times
		status := bridge.StatusRejected
		if errors.Is(verr, bridge.ErrExpired) {
			status = bridge.StatusExpired
		}
		d.finish(j, bridge.Receipt{Status: status, Reason: bridge.Reason(verr), Detail: verr.Error()})
		return false
	}
	if d.expired(j, ent) || d.cancelledBefore(j) {
		return false
	}
	in, err := d.settle(j)
	if err != nil {
		if ent.State == ledger.StateSeen {
			if _, err := d.ledger.Transition(key, []ledger.State{ledger.StateSeen}, ledger.StatePending, nil); err != nil {
				d.log.Warn("ledger", "key", key, "err", err)
			}
		}
		if d.opt.Now().Sub(ent.FirstSeen) > d.opt.PendingTimeout {
			d.finish(j, bridge.Receipt{Status: bridge.StatusRejected, Reason: "incomplete", Detail: fmt.Sprintf("payload not complete after %s: %v", d.opt.PendingTimeout, err)})
		} else {
			d.waiting(bridge.RequestPath(d.me, agent, id, bridge.ExtPayload), -1, err)
		}
		return false
	}
	return d.admit(j, in, admitNew)
}

// recordedExpiry is the expiry the ledger keeps a request's id for: the
// signed one, or, for a manifest that claims a longer validity than any
// request may have (refused for it), its creation plus MaxValidity. Past it
// (and the skew) no version of the request can be valid.
func recordedExpiry(req *bridge.Request) time.Time {
	created, expires := time.Unix(req.Created, 0), time.Unix(req.Expires, 0)
	if expires.Sub(created) > bridge.MaxValidity {
		return created.Add(bridge.MaxValidity)
	}
	return expires
}

// outsideRecordWindow reports whether a refused request is past its
// recorded expiry beyond the skew, or created further ahead than the skew
// and a whole validity: either way it gets no ledger entry (the first
// because GC may have forgotten an earlier one, the second because its
// entry would outlive any sensible retention).
func outsideRecordWindow(req *bridge.Request, expires, now time.Time, skew time.Duration) bool {
	return now.After(expires.Add(skew)) || time.Unix(req.Created, 0).After(now.Add(skew+bridge.MaxValidity))
}

// invalidKey checks whether a manifest that no valid key verifies was
// signed by one of the agent's revoked or expired keys. If so, the request is
// authentic but refused, and is answered with that reason (the agent sees it
// in `bridge status`); otherwise the original error stands.
func (d *Daemon) invalidKey(data []byte, id, agent string, keys *agentKeys, verr error) (*bridge.Request, error) {
	bad, reasons := keys.invalidSign(d.opt.Now())
	for i, k := range bad {
		c := d.check(agent, keys)
		c.AgentKeys = [][]byte{k}
		c.AgentBoxKid = func(kid string) bool { _, ok := keys.boxPub(kid); return ok }
		if req, _ := bridge.OpenRequest(data, id, c); req != nil {
			if reasons[i] == "revoked" {
				return req, fmt.Errorf("request %s: %w", id, bridge.ErrKeyRevoked)
			}
			return req, fmt.Errorf("request %s: %w", id, bridge.ErrKeyExpired)
		}
	}
	return nil, verr
}

// expired finishes a request that is past its signed expiry or waited on
// the host longer than MaxQueueAge, and reports whether it did.
func (d *Daemon) expired(j *job, ent ledger.Entry) bool {
	now := d.opt.Now()
	switch {
	case !now.Before(time.Unix(j.req.Expires, 0)):
		d.finish(j, bridge.Receipt{Status: bridge.StatusExpired, Reason: "expired", Detail: "expired before it could run"})
	case now.Sub(ent.FirstSeen) > d.opt.MaxQueueAge:
		d.finish(j, bridge.Receipt{Status: bridge.StatusExpired, Reason: "expired", Detail: fmt.Sprintf("waited on the host for more than %s", d.opt.MaxQueueAge)})
	default:
		return false
	}
	return true
}

// cancelledBefore finishes a request whose agent cancelled it before it ran.
func (d *Daemon) cancelledBefore(j *job) bool {
	if !d.cancelled(j.agent, j.req.ID) {
		return false
	}
	d.finish(j, bridge.Receipt{Status: bridge.StatusCancelled, Reason: "cancelled", Detail: "cancelled before it ran"})
	return true
}

func (d *Daemon) keepManifest(j *job) error {
	dir := d.home.Path("manifests", j.agent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return syncsafe.WriteFileAtomic(filepath.Join(dir, j.req.ID+"."+bridge.ExtManifest), j.manifest)
}

// settle copies the payload into a private spool if it matches the pin.
func (d *Daemon) settle(j *job) (spool, error) {
	// A spool of its own per evaluation: two evaluations of one id
	// (harmless by design, invariant 6) must not share a copy.
	f, err := d.newSpool(j.req.ID, bridge.ExtPayload, j.req.Payload.Len)
	if err != nil {
		return nil, err
	}
	rel := bridge.RequestPath(d.me, j.agent, j.req.ID, bridge.ExtPayload)
	err = syncsafe.Settle(d.folder, rel, j.req.Payload.Len, j.req.Payload.Digest(), f)
	if err != nil {
		f.Close()
		// Say which "not yet" it is (SPEC §8.5): absent or shorter is still
		// arriving; other bytes are another version, or not this payload.
		switch fi, serr := d.folder.Lstat(rel); {
		case errors.Is(err, fs.ErrNotExist), serr == nil && fi.Size() < j.req.Payload.Len:
			return nil, fmt.Errorf("%w: %v", bridge.ErrPending, err)
		case errors.Is(err, syncsafe.ErrUnsettled):
			return nil, fmt.Errorf("%w: %v", bridge.ErrHashMismatch, err)
		}
		return nil, err
	}
	return f, nil
}

// admitMode says why a request is admitted.
type admitMode int

const (
	admitNew       admitMode = iota // first evaluation
	admitResume                     // crash recovery re-runs an idempotent op that was running
	admitReconcile                  // crash recovery asks the op's reconcile command what happened
	admitApproved                   // a human approved a request that waited for approval
)

// admit decrypts the spooled payload, applies the policy, claims the id and
// hands it to a run goroutine (it reports whether it did). After a crash
// (admitResume, admitReconcile) the entry is running, and a refusal can
// only end it as failed or uncertain.
func (d *Daemon) admit(j *job, in spool, mode admitMode) bool {
	defer in.Close()
	refuse := func(rc bridge.Receipt) bool {
		switch mode {
		case admitResume:
			rc.Status = bridge.StatusFailed
		case admitReconcile:
			rc.Status, rc.Reason = bridge.StatusUncertain, "crashed"
			rc.Detail = "the host stopped while the op ran, and its reconcile check could not be run: " + rc.Detail
		}
		d.finish(j, rc)
		return false
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		d.log.Error("read spool", "err", err)
		return false
	}
	stdin, err := d.newSpool(j.req.ID, "stdin", j.req.Payload.Len)
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
		return refuse(bridge.Receipt{Status: bridge.StatusRejected, Reason: "unknown-key", Detail: "sealed to a host key this host no longer keeps"})
	}
	call, err := bridge.OpenCall(in, j.req, me, stdin)
	if err != nil {
		return refuse(bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Detail: err.Error()})
	}
	if call.Op == bridge.PingOp {
		return d.ping(j)
	}
	inv, err := d.policy.Render(j.keys.name, call.Op, call.Args, policy.RenderContext{Env: d.opt.Env, Vars: map[string]string{"request_id": j.req.ID}})
	if err != nil {
		rc := bridge.Receipt{Status: bridge.StatusRejected, Op: call.Op, Detail: err.Error(), PolicySHA256: d.policy.SHA256}
		switch {
		case errors.Is(err, policy.ErrNotAllowed), errors.Is(err, policy.ErrUnknownOp):
			rc.Reason = "not-allowed"
		case errors.Is(err, policy.ErrInvalidArg):
			rc.Reason = "bad-argument"
		default:
			rc.Status, rc.Reason = bridge.StatusFailed, "host-error"
		}
		return refuse(rc)
	}
	// The synced folder is never a source of code or a working directory:
	// anything in it may have been written by anyone who can write the folder.
	for _, p := range []string{inv.Argv[0], inv.Dir} {
		if bridge.InsideDir(p, d.home.Config.Folder) {
			return refuse(bridge.Receipt{Status: bridge.StatusFailed, Reason: "host-error", Op: inv.Op,
				Detail: "the op would run code or work inside the synced folder (" + p + "); the host refuses"})
		}
	}
	d.withRequestEnv(inv, j.req.ID)
	if inv.Approve && mode == admitNew {
		return d.awaitApproval(j, inv)
	}
	if mode == admitReconcile {
		handed = true
		d.wg.Add(1)
		go d.reconcileCheck(j, inv, stdin)
		return true
	}
	ceilingDone, queueDone := func() {}, func() {}
	if mode == admitNew {
		// Not for an approved request: a human's decision must not wait
		// for a rescan.
		var ok bool
		if queueDone, ok = d.reserveQueue(inv.Op, inv.Concurrency, j.key); !ok {
			d.log.Debug("op full: evaluated again when a run of it ends", "key", j.key, "op", inv.Op)
			return false
		}
	}
	if mode == admitNew || mode == admitApproved {
		var over *bridge.Receipt
		if ceilingDone, over = d.reserveCeiling(j.keys.name, inv); over != nil {
			queueDone()
			return refuse(*over)
		}
		from := []ledger.State{ledger.StateSeen, ledger.StatePending}
		if mode == admitApproved {
			from = []ledger.State{ledger.StateAwaitingApproval}
		}
		if _, err := d.ledger.Transition(j.key, from, ledger.StateClaimed,
			func(e *ledger.Entry) { e.Op, e.Idempotent = inv.Op, inv.Idempotent }); err != nil {
			ceilingDone()
			queueDone()
			d.log.Debug("claim lost", "key", j.key, "err", err)
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

// withRequestEnv hands the request id to the op (SPEC §7.3): as
// BRIDGE_REQUEST_ID and BRIDGE_IDEMPOTENCY_KEY, so a downstream system can
// deduplicate on it. A keyed request keeps its id across retries.
func (d *Daemon) withRequestEnv(inv *policy.Invocation, id string) {
	env := inv.Env[:0:0]
	for _, kv := range inv.Env {
		if !strings.HasPrefix(kv, "BRIDGE_REQUEST_ID=") && !strings.HasPrefix(kv, "BRIDGE_IDEMPOTENCY_KEY=") {
			env = append(env, kv)
		}
	}
	inv.Env = append(env, "BRIDGE_REQUEST_ID="+id, "BRIDGE_IDEMPOTENCY_KEY="+id)
}

// reconcileCheck runs an op's reconcile command after a crash left the op
// running (invariant 5, DESIGN §5): exit 0 means the effect happened (done,
// with the check's output); exit 3 means it did not (run the op now, once);
// anything else leaves the request uncertain for a human.
func (d *Daemon) reconcileCheck(j *job, inv *policy.Invocation, stdin spool) {
	handed := false
	defer func() {
		if !handed {
			stdin.Close()
			d.release(j.key)
			d.wg.Done()
		}
	}()
	if len(inv.Reconcile) == 0 {
		d.finish(j, bridge.Receipt{Status: bridge.StatusUncertain, Reason: "crashed", Op: inv.Op,
			Detail: "the host stopped while the op ran; it may or may not have had its effect. Resolve with `bridge reconcile`"})
		return
	}
	d.audit.log(AuditEvent{Event: "reconcile-check", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: strings.Join(inv.Reconcile, " ")})
	out := runner.Run(d.runCtx, runner.Spec{Argv: inv.Reconcile, Dir: inv.Dir, Env: inv.Env, Timeout: inv.Timeout,
		MaxOutput: inv.MaxOutput, Grace: d.opt.Grace})
	switch {
	case out.StartErr == nil && !out.TimedOut && !out.Cancelled && out.ExitCode == 0:
		d.finishWithOutput(j, bridge.Receipt{Status: bridge.StatusDone, Reason: "reconciled", Op: inv.Op, Argv: inv.Reconcile,
			PolicySHA256: d.policy.SHA256, Started: out.Started.UnixMilli(), Finished: out.Finished.UnixMilli(),
			StdoutTotal: out.Stdout.Total, StdoutTruncated: out.Stdout.Truncated, StderrTotal: out.Stderr.Total, StderrTruncated: out.Stderr.Truncated,
			Detail: "the host stopped while the op ran; its reconcile command reports the effect happened, so it was not run again"},
			out.Stdout.Data, out.Stderr.Data)
	case out.StartErr == nil && !out.TimedOut && !out.Cancelled && out.ExitCode == 3:
		d.log.Info("reconcile: the op had no effect; running it now", "key", j.key, "op", inv.Op)
		handed = true
		d.run(j, inv, stdin, true, nil) // owns the key, stdin and the WaitGroup slot from here
	default:
		detail := fmt.Sprintf("exit %d", out.ExitCode)
		if out.StartErr != nil {
			detail = out.StartErr.Error()
		}
		d.finish(j, bridge.Receipt{Status: bridge.StatusUncertain, Reason: "crashed", Op: inv.Op,
			Detail: "the host stopped while the op ran, and its reconcile command could not tell (" + detail + "). Resolve with `bridge reconcile`"})
	}
}

// run waits for a slot of the op's concurrency, then runs it and finishes.
// It owns the key (releases it) and the stdin spool file.
func (d *Daemon) run(j *job, inv *policy.Invocation, stdin spool, resume bool, after func()) {
	defer d.wg.Done()
	if after != nil {
		defer after() // once the key is released, before the slot
	}
	defer d.release(j.key)
	defer stdin.Close()
	// The cancel function is registered before the last cancel check, so a
	// cancel arriving at any moment from here on reaches the run.
	ctx, cancel := context.WithCancel(d.runCtx)
	defer cancel()
	d.mu.Lock()
	d.cancels[j.key] = cancel
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.cancels, j.key)
		d.mu.Unlock()
	}()
	slot := d.acquire(ctx, inv.Op, inv.Concurrency)
	if slot == nil {
		if d.runCtx.Err() != nil {
			return // shutting down while still queued: claimed, not started; the next start evaluates it again
		}
		d.finish(j, bridge.Receipt{Status: bridge.StatusCancelled, Reason: "cancelled", Op: inv.Op, Detail: "cancelled before it ran"})
		return
	}
	defer slot()
	if !resume {
		if ent, err := d.ledger.Get(j.key); err == nil && d.expired(j, ent) {
			return
		}
		if d.cancelled(j.agent, j.req.ID) {
			d.finish(j, bridge.Receipt{Status: bridge.StatusCancelled, Reason: "cancelled", Op: inv.Op, Detail: "cancelled before it ran"})
			return
		}
	}
	from := ledger.StateClaimed
	if resume {
		from = ledger.StateRunning
	}
	// Ledger before effect (invariant 3): running is durable before the
	// process exists.
	if _, err := d.ledger.Transition(j.key, []ledger.State{from}, ledger.StateRunning, nil); err != nil {
		d.log.Error("ledger", "key", j.key, "err", err)
		return
	}
	d.crashPoint("running")
	if d.crashAt == "mid-run" {
		go func() { time.Sleep(300 * time.Millisecond); d.crashPoint("mid-run") }()
	}
	if _, err := stdin.Seek(0, io.SeekStart); err != nil {
		d.log.Error("spool stdin", "err", err)
		return
	}
	d.audit.log(AuditEvent{Event: "run", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: strings.Join(inv.Argv, " ")})
	prog := newProgress(d, j)
	progStop, progDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(progDone); prog.loop(progStop) }()
	out := runner.Run(ctx, runner.Spec{
		Argv: inv.Argv, Dir: inv.Dir, Env: inv.Env, Stdin: stdin, Timeout: inv.Timeout,
		MaxOutput: inv.MaxOutput, Grace: d.opt.Grace, Limits: runnerLimits(inv.Limits),
		OnOutput: prog.write,
	})
	close(progStop)
	<-progDone
	d.chargeCPU(j.keys.name, out.CPU)
	rc := bridge.Receipt{
		Status: bridge.StatusDone, Op: inv.Op, Argv: inv.Argv, PolicySHA256: d.policy.SHA256,
		ExitCode: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut,
		Started: out.Started.UnixMilli(), Finished: out.Finished.UnixMilli(),
		StdoutTotal: out.Stdout.Total, StdoutTruncated: out.Stdout.Truncated,
		StderrTotal: out.Stderr.Total, StderrTruncated: out.Stderr.Truncated,
	}
	// The signed result commits to the progress chunks published meanwhile.
	rc.ProgressCount, rc.ProgressHead = prog.head()
	switch {
	case out.Cancelled && d.runCtx.Err() != nil:
		rc.Status, rc.Reason, rc.Detail = bridge.StatusFailed, "host-shutdown", "the host daemon was stopped while the op ran"
	case out.Cancelled:
		rc.Status, rc.Reason = bridge.StatusCancelled, "cancelled"
	case out.StartErr != nil:
		rc.Status, rc.Reason, rc.Detail = bridge.StatusFailed, "start-failed", out.StartErr.Error()
	case out.TimedOut:
		rc.Reason, rc.Detail = "timeout", fmt.Sprintf("timed out after %s", inv.Timeout)
	}
	if len(out.Notes) > 0 && rc.Detail == "" {
		rc.Detail = strings.Join(out.Notes, "; ")
	}
	d.finishWithOutput(j, rc, out.Stdout.Data, out.Stderr.Data)
}

// acquire takes a slot of op's concurrency limit (0 = unlimited); nil if
// ctx ended first.
func (d *Daemon) acquire(ctx context.Context, op string, limit int) func() {
	if limit <= 0 {
		return func() {}
	}
	d.mu.Lock()
	sem := d.sems[op]
	if sem == nil || cap(sem) != limit {
		sem = make(chan struct{}, limit)
		d.sems[op] = sem
	}
	d.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return func() { <-sem }
	case <-ctx.Done():
		return nil
	}
}

var statusState = map[string]ledger.State{
	bridge.StatusDone: ledger.StateDone, bridge.StatusFailed: ledger.StateFailed, bridge.StatusRejected: ledger.StateRejected,
	bridge.StatusExpired: ledger.StateExpired, bridge.StatusCancelled: ledger.StateCancelled, bridge.StatusUncertain: ledger.StateUncertain,
}

func (d *Daemon) finish(j *job, rc bridge.Receipt) {
	d.finishWithOutput(j, rc, nil, nil)
}

// finishWithOutput publishes the result and only then records the final
// state: a crash in between leaves the result published and the ledger not
// final, and the next evaluation adopts the published result (invariant 3).
func (d *Daemon) finishWithOutput(j *job, rc bridge.Receipt, stdout, stderr []byte) {
	if rc.PolicySHA256 == "" && d.policy != nil {
		rc.PolicySHA256 = d.policy.SHA256
	}
	stdout, stderr = d.redactor.redactResult(&rc, stdout, stderr)
	resSHA, status, err := d.publishResult(j, rc, stdout, stderr)
	if err != nil {
		// The entry stays where it is; the next rescan retries the publish
		// (evaluate adopts sealed copies of entries left in flight).
		d.log.Error("publish result", "key", j.key, "err", err)
		return
	}
	to := statusState[status]
	var from []ledger.State
	for _, s := range []ledger.State{ledger.StateSeen, ledger.StatePending, ledger.StateAwaitingApproval, ledger.StateClaimed, ledger.StateRunning, ledger.StateUncertain} {
		if ledger.CanTransition(s, to) {
			from = append(from, s)
		}
	}
	if _, err := d.ledger.Transition(j.key, from, to, func(e *ledger.Entry) {
		e.ResultSHA256, e.Reason = resSHA, rc.Reason
		if rc.Op != "" {
			e.Op = rc.Op
		}
	}); err != nil {
		d.log.Error("ledger", "key", j.key, "err", err)
		return
	}
	d.markFinished(j.agent, j.req.ID)
	ev := AuditEvent{Event: "result", Agent: j.agent, ID: j.req.ID, Op: rc.Op, Status: status, Reason: rc.Reason, Detail: rc.Detail}
	if status == bridge.StatusDone {
		code := rc.ExitCode
		ev.Exit = &code
	}
	d.audit.log(ev)
	d.log.Info("result", "agent", j.keys.name, "id", j.req.ID, "op", rc.Op, "status", status, "reason", rc.Reason, "exit", rc.ExitCode)
}

// publishResult seals the result into private copies under results/ (the
// output first, the manifest last, so a manifest copy implies a complete
// pair), then publishes both into the folder. If copies exist from an
// earlier attempt, they are published instead of new ones: one id has one
// result. It returns the result manifest's SHA-256 and its status.
func (d *Daemon) publishResult(j *job, rc bridge.Receipt, stdout, stderr []byte) (string, string, error) {
	dir := d.home.Path("results", j.agent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	outCopy := filepath.Join(dir, j.req.ID+"."+bridge.ExtOutput)
	resCopy := filepath.Join(dir, j.req.ID+"."+bridge.ExtResult)
	manifest, err := os.ReadFile(resCopy)
	if errors.Is(err, fs.ErrNotExist) {
		replyKey, ok := j.keys.boxPub(j.req.ReplyBoxKid)
		if !ok {
			return "", "", fmt.Errorf("result %s: the reply key is not the agent's", j.req.ID)
		}
		var buf bytes.Buffer
		manifest, err = bridge.SealResult(&buf, bridge.NewResult{
			Host: d.own().current, HostID: d.me, AgentBoxPub: replyKey, Request: j.req, RequestSHA: j.sha,
			Receipt: rc, Stdout: stdout, Stderr: stderr, Created: d.opt.Now(),
		})
		if err != nil {
			return "", "", err
		}
		if err := syncsafe.WriteFileAtomic(outCopy, buf.Bytes()); err != nil {
			return "", "", err
		}
		if err := syncsafe.WriteFileAtomic(resCopy, manifest); err != nil {
			return "", "", err
		}
		d.crashPoint("staged")
	} else if err != nil {
		return "", "", err
	}
	status, err := d.publishCopies(j.agent, j.req.ID)
	return bridge.SHA256Hex(manifest), status, err
}

// ownResult verifies a result manifest as one this host signed for agent
// and id, and returns its status.
func (d *Daemon) ownResult(data []byte, agent, id string) (string, error) {
	var res bridge.Result
	if err := bridge.OpenBody(bcrypto.KindResult, data, d.own().signPubs(), &res); err != nil {
		return "", err
	}
	if res.ID != id || res.Agent != agent || res.Host != d.me {
		return "", fmt.Errorf("result %s: %w", id, bridge.ErrNameMismatch)
	}
	return res.Status, nil
}

// publishCopies publishes the private copies of a result (output, then
// manifest) where the folder does not already hold them. The host owns
// these names (SPEC §5), so what stands there is replaced when it is not a
// result this host signed (a folder writer's junk, a damaged copy) or when
// it is an "uncertain" result that was since settled.
func (d *Daemon) publishCopies(agent, id string) (string, error) {
	dir := d.home.Path("results", agent)
	manifest, err := os.ReadFile(filepath.Join(dir, id+"."+bridge.ExtResult))
	if err != nil {
		return "", err
	}
	status, err := d.ownResult(manifest, agent, id)
	if err != nil {
		return "", fmt.Errorf("private result copy: %w", err)
	}
	resPath, outPath := bridge.ResultPath(d.me, agent, id, bridge.ExtResult), bridge.ResultPath(d.me, agent, id, bridge.ExtOutput)
	replace := false
	existing, err := d.folder.ReadFile(resPath, bcrypto.KindResult.MaxSize())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err == nil && bytes.Equal(existing, manifest):
		// Published already; make sure the output is intact too.
		if d.outputIntact(manifest, outPath) {
			return status, nil
		}
		defer d.opt.Nudger.Nudge(outPath)
		return status, d.publishFile(outPath, filepath.Join(dir, id+"."+bridge.ExtOutput), true)
	case err == nil:
		old, verr := d.ownResult(existing, agent, id)
		switch {
		case verr != nil:
			d.refuseFile(resPath, fmt.Errorf("replacing a file at a result name that this host did not sign: %w", verr))
		case old != bridge.StatusUncertain:
			return "", fmt.Errorf("result %s: another result of this host is already published", id)
		}
		replace = true
	default: // not a regular file, too large: not ours either
		d.refuseFile(resPath, fmt.Errorf("replacing what stands at a result name: %w", err))
		if rerr := d.folder.Remove(resPath); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return "", rerr
		}
	}
	// One nudge for both files: Syncthing sends an index update at most
	// every 250 ms, so a second scan right after the first would wait that
	// long (docs/CLI.md, Syncthing nudge).
	defer d.opt.Nudger.Nudge(outPath, resPath)
	// An output without its manifest is ours and referenced by nothing, so
	// it may be replaced.
	// The output's directory entry becomes durable with the manifest's
	// publish into the same directory; until then the ledger is not done,
	// and a crash publishes both again from the private copies.
	if err := d.publishFile(outPath, filepath.Join(dir, id+"."+bridge.ExtOutput), true, syncsafe.WithoutDirSync()); err != nil {
		return "", err
	}
	d.crashPoint("published-output")
	if err := d.publishFile(resPath, filepath.Join(dir, id+"."+bridge.ExtResult), replace); err != nil {
		return "", err
	}
	d.crashPoint("published")
	return status, nil
}

// outputIntact reports whether the folder's output file matches the pin in
// the result manifest (streamed: outputs can be large).
func (d *Daemon) outputIntact(manifest []byte, rel string) bool {
	env, err := bcrypto.Parse(bcrypto.KindResult, manifest)
	if err != nil {
		return false
	}
	var res bridge.Result
	if bcrypto.DecodeBody(env.Body(), &res) != nil {
		return false
	}
	return syncsafe.Settle(d.folder, rel, res.Payload.Len, res.Payload.Digest(), io.Discard) == nil
}

func (d *Daemon) publishFile(rel, src string, replace bool, opts ...syncsafe.PublishOption) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	write := func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}
	opts = append(opts, syncsafe.WithMode(0o644))
	if replace {
		return d.folder.PublishReplace(rel, write, opts...)
	}
	return d.folder.Publish(rel, write, opts...)
}

// duplicate handles a request id the ledger already finished: it never runs
// again (invariant 4); its stored result is re-published if it is missing
// or was replaced.
func (d *Daemon) duplicate(ent ledger.Entry) {
	copyPath := d.home.Path("results", ent.Agent, ent.ID+"."+bridge.ExtResult)
	if want, err := os.ReadFile(copyPath); err == nil {
		have, err := d.folder.ReadFile(bridge.ResultPath(d.me, ent.Agent, ent.ID, bridge.ExtResult), bcrypto.KindResult.MaxSize())
		if err != nil || !bytes.Equal(have, want) || !d.outputIntact(want, bridge.ResultPath(d.me, ent.Agent, ent.ID, bridge.ExtOutput)) {
			if _, err := d.publishCopies(ent.Agent, ent.ID); err != nil {
				d.log.Warn("re-publish result", "key", ent.Key, "err", err)
				return
			}
			d.audit.log(AuditEvent{Event: "republished", Agent: ent.Agent, ID: ent.ID})
		}
	}
	d.markFinished(ent.Agent, ent.ID)
}

// refuseFile records a file that will never be admitted as it is, once per
// file and reason.
func (d *Daemon) refuseFile(p string, err error) {
	if !d.firstTime("refused:" + p + ":" + err.Error()) {
		return
	}
	d.log.Warn("refused", "file", p, "reason", bridge.Reason(err), "err", err)
	d.audit.log(AuditEvent{Event: "refused", File: p, Reason: bridge.Reason(err), Detail: err.Error()})
}

// waiting records, once per file and state, that a file is not complete
// yet: not an error (it may still be arriving), but visible in the audit log
// with its reason, and turned into a signed rejection after PendingTimeout.
func (d *Daemon) waiting(p string, size int, err error) {
	if !d.firstTime(fmt.Sprintf("waiting:%s:%d:%s", p, size, bridge.Reason(err))) {
		return
	}
	d.log.Debug("waiting for a file to complete", "file", p, "reason", bridge.Reason(err), "err", err)
	d.audit.log(AuditEvent{Event: "waiting", File: p, Reason: bridge.Reason(err), Detail: err.Error()})
}

// cancelled reports whether a verified cancel file exists for the request.
func (d *Daemon) cancelled(agent, id string) bool {
	p := bridge.RequestPath(d.me, agent, id, bridge.ExtCancel)
	data, err := d.folder.ReadFile(p, bcrypto.KindCancel.MaxSize())
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.refuseFile(p, err)
		}
		return false
	}
	keys := d.agents()[agent]
	if keys == nil {
		return false
	}
	if _, err = bridge.OpenCancel(data, id, d.me, agent, keys.sign(d.opt.Now())); err != nil {
		if !errors.Is(err, bcrypto.ErrTruncated) {
			d.refuseFile(p, err)
		}
		return false
	}
	return true
}

// handleCancel stops a claimed or running op whose agent cancelled it, or
// evaluates the request again so a cancel before admission is recorded.
func (d *Daemon) handleCancel(agent, id string) {
	if !d.cancelled(agent, id) {
		return
	}
	key := agent + "/" + id
	d.mu.Lock()
	cancel := d.cancels[key]
	d.mu.Unlock()
	if cancel != nil {
		d.log.Info("cancelling", "key", key)
		cancel()
		return
	}
	d.schedule(agent, id)
}

// recover looks at what a crash left in flight (invariant 5): a claimed
// request never started and is simply evaluated again; a running one is
// re-run only if its op is idempotent, else it becomes uncertain and the
// agent is told. A result that was sealed before the crash is adopted.
func (d *Daemon) recover() error {
	inflight, err := d.ledger.InFlight()
	if err != nil {
		return err
	}
	for _, ent := range inflight {
		keys := d.agents()[ent.Agent]
		if keys == nil {
			d.log.Warn("in-flight request of an agent no longer trusted", "key", ent.Key)
			continue
		}
		j, err := d.reload(ent, keys, false)
		if err != nil {
			d.log.Error("recover: cannot reload the admitted manifest", "key", ent.Key, "err", err)
			continue
		}
		if _, err := os.Stat(d.home.Path("results", ent.Agent, ent.ID+"."+bridge.ExtResult)); err == nil {
			d.log.Info("recover: adopting the sealed result", "key", ent.Key)
			d.finish(j, bridge.Receipt{})
			continue
		}
		switch {
		case ent.State == ledger.StateClaimed:
			if _, err := d.ledger.Transition(ent.Key, []ledger.State{ledger.StateClaimed}, ledger.StatePending, nil); err != nil {
				return err
			}
			d.log.Info("recover: claimed but never started; evaluating again", "key", ent.Key)
			d.schedule(ent.Agent, ent.ID)
		case ent.Idempotent:
			in, err := d.settle(j)
			if err != nil {
				d.finish(j, bridge.Receipt{Status: bridge.StatusUncertain, Reason: "crashed", Op: ent.Op,
					Detail: "the host stopped while the op ran, and its payload is no longer there to run it again"})
				continue
			}
			d.log.Info("recover: re-running an idempotent op", "key", ent.Key, "op", ent.Op)
			d.mu.Lock()
			d.active[ent.Key] = true
			d.mu.Unlock()
			if !d.admit(j, in, admitResume) {
				d.release(ent.Key)
			}
		default:
			// Not idempotent: ask the op's reconcile command, if it has one;
			// otherwise (or if the payload is gone) it is uncertain.
			in, err := d.settle(j)
			if err != nil {
				d.log.Warn("recover: op was running when the host stopped; marking it uncertain", "key", ent.Key, "op", ent.Op)
				d.finish(j, bridge.Receipt{Status: bridge.StatusUncertain, Reason: "crashed", Op: ent.Op,
					Detail: "the host stopped while the op ran; it may or may not have had its effect. Resolve with `bridge reconcile`"})
				continue
			}
			d.mu.Lock()
			d.active[ent.Key] = true
			d.mu.Unlock()
			if !d.admit(j, in, admitReconcile) {
				d.release(ent.Key)
			}
		}
	}
	return nil
}

// reload re-reads and re-verifies the manifest a ledger entry admitted,
// from the host's private copy. The signature is checked again; the times
// are not (the request was admitted). Any generation of the agent's keys
// that is not revoked verifies it, as one did at admission: a rotation
// since must not strand an entry awaiting approval or interrupted by a
// crash. A revoked one does too when finishing: the request then only gets
// its final answer (denied, expired, a result already sealed), and never
// runs.
func (d *Daemon) reload(ent ledger.Entry, keys *agentKeys, finishing bool) (*job, error) {
	data, err := os.ReadFile(d.home.Path("manifests", ent.Agent, ent.ID+"."+bridge.ExtManifest))
	if err != nil {
		return nil, err
	}
	if bridge.SHA256Hex(data) != ent.ManifestSHA256 {
		return nil, fmt.Errorf("%w: the kept manifest changed", bridge.ErrReplay)
	}
	c := d.check(ent.Agent, keys)
	now := d.opt.Now()
	usable := func(pk bridge.PeerKey) bool { return finishing || keys.peer.State(pk, now) != bridge.KeyRevoked }
	c.AgentKeys = nil
	for _, pk := range keys.peer.Keys {
		if usable(pk) {
			c.AgentKeys = append(c.AgentKeys, pk.SignPub)
		}
	}
	c.AgentBoxKid = func(kid string) bool {
		for _, pk := range keys.peer.Keys {
			if pk.BoxKid() == kid && usable(pk) {
				return true
			}
		}
		return false
	}
	req, err := bridge.OpenRequest(data, ent.ID, c)
	if req == nil {
		return nil, err
	}
	return &job{agent: ent.Agent, keys: keys, req: req, manifest: data, sha: ent.ManifestSHA256, key: ent.Key}, nil
}

// ping answers the built-in no-op: claimed, running and done like any op, so
// it measures the whole pipeline except the process start.
func (d *Daemon) ping(j *job) bool {
	if _, err := d.ledger.Transition(j.key, []ledger.State{ledger.StateSeen, ledger.StatePending}, ledger.StateClaimed,
		func(e *ledger.Entry) { e.Op, e.Idempotent = bridge.PingOp, true }); err != nil {
		return false
	}
	if _, err := d.ledger.Transition(j.key, []ledger.State{ledger.StateClaimed}, ledger.StateRunning, nil); err != nil {
		return false
	}
	now := d.opt.Now().UnixMilli()
	d.finishWithOutput(j, bridge.Receipt{Status: bridge.StatusDone, Op: bridge.PingOp, Started: now, Finished: now, StdoutTotal: 5}, []byte("pong\n"), nil)
	return false
}
