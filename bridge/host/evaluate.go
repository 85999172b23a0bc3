package host

import (
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
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// This file is the front of the host pipeline (SPEC §8): a request's files
// are verified and the id recorded (deliver), its payload settled into a
// private spool, and then admit (admit.go) decides what runs. Every state
// change goes through the lifecycle table (lifecycle.go).

// job is one authentic request on its way through the pipeline.
type job struct {
	agent    string
	keys     *agentKeys
	req      *bridge.Request
	manifest []byte
	sha      string // of the manifest file
	key      string
	rules    *rules            // the policy this evaluation follows, taken once at its start (reload.go)
	args     map[string]string // the request's arguments as sent, once opened
}

// evaluate runs the pipeline for one request id: SPEC §8's checks, as the
// steps of evaluation below. It is safe to call any number of times
// (invariant 6): the ledger decides what happens. The caller owns the key;
// evaluate reports whether it handed it to a run goroutine, which then
// releases it.
func (d *Daemon) evaluate(agent, id string) bool {
	keys := d.agents()[agent]
	if keys == nil {
		return false // trust was withdrawn
	}
	e := &evaluation{d: d, agent: agent, id: id, keys: keys, key: agent + "/" + id,
		mpath: bridge.RequestPath(d.me, agent, id, bridge.ExtManifest)}
	for _, st := range evaluationSteps {
		if !st.next(e) {
			break
		}
	}
	return e.handed
}

// evaluation is one pass of evaluate over a request: what each step found,
// for the steps after it.
type evaluation struct {
	d          *Daemon
	agent, id  string
	keys       *agentKeys
	key, mpath string
	ent        ledger.Entry // the ledger's entry, if exists
	exists     bool
	data       []byte    // the manifest file's bytes
	j          *job      // from the envelope step on
	refused    error     // an authentic request's refusal for its times or key (§8.2–3), answered by the ledger step
	expires    time.Time // the expiry the ledger records
	in         spool     // the settled payload
	handed     bool      // the key went to a run goroutine (admit)
}

// evaluationSteps are SPEC §8's checks in the order the host takes them;
// each reports whether the evaluation goes on. Two are taken out of §8's
// order, and say why. TestEvaluationStepsFollowSpec holds the list to SPEC
// §8: every item named, the others in order.
var evaluationSteps = []struct {
	spec       string // the items of SPEC §8 the step checks
	outOfOrder string // why it is not where §8 has it
	next       func(*evaluation) bool
}{
	{"4", "the ledger first: a request it answered or holds past seen and pending is never read from the folder again", (*evaluation).known},
	{"1", "", (*evaluation).file},
	{"2, 3", "", (*evaluation).envelope},
	{"4", "", (*evaluation).record},
	{"3", "the first sight plus the maximum queue age, and a cancel: both need the recorded entry", (*evaluation).inTime},
	{"5", "", (*evaluation).payload},
	{"6, 7", "", (*evaluation).call},
}

// known: an id the ledger answered is never run again (invariant 4): its
// result is published again if it is missing (duplicate); an authentic
// manifest under it with other content is a forgery or a bug, and is
// reported. One past seen and pending is taken on from its kept manifest.
func (e *evaluation) known() bool {
	d := e.d
	ent, err := d.ledger.Get(e.key)
	e.ent, e.exists = ent, err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		d.log.Error("ledger read", "key", e.key, "err", err)
		return false
	}
	if e.exists && ent.State.Answered() {
		if data, err := d.folder.ReadFile(e.mpath, bcrypto.KindRequest.MaxSize()); err == nil && bridge.SHA256Hex(data) != ent.ManifestSHA256 {
			if req, err := bridge.OpenRequest(data, e.id, d.keys.check(e.agent, e.keys)); req != nil || err == nil {
				d.refuseFile(e.mpath, fmt.Errorf("%w: %s was recorded with another manifest", bridge.ErrReplay, e.id))
			} else if !errors.Is(err, bcrypto.ErrTruncated) {
				d.refuseFile(e.mpath, err)
			}
		}
		d.duplicate(ent, e.keys)
		return false
	}
	if e.exists && ent.State != ledger.StateSeen && ent.State != ledger.StatePending {
		d.evaluateKept(ent, e.keys)
		return false
	}
	return true
}

// file reads the manifest: a regular file of at most its cap (§8.1), once
// per version when it was refused before (refused.go).
func (e *evaluation) file() bool {
	d := e.d
	if !e.exists && d.refusals.still(e.mpath) {
		return false
	}
	d.probe.Add(probe.ManifestReads)
	data, err := d.folder.ReadFile(e.mpath, bcrypto.KindRequest.MaxSize())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if e.exists && d.out.hasSealedResult(e.agent, e.id) {
			d.evaluateKept(e.ent, e.keys) // answered before the agent's files went
		}
		return false // the payload came first; the manifest will follow
	case errors.Is(err, syncsafe.ErrTooLarge), errors.Is(err, syncsafe.ErrNotRegular):
		d.refuseFile(e.mpath, err)
		d.refusals.mark(e.mpath)
		return false
	case err != nil:
		d.log.Warn("read manifest", "file", e.mpath, "err", err)
		return false
	}
	e.data = data
	return true
}

// envelope opens the signed manifest (§8.2–3). An authentic request
// refused for its times or its key goes on to be recorded and answered
// (refused); anything not authentic ends here.
func (e *evaluation) envelope() bool {
	d := e.d
	e.j = &job{agent: e.agent, keys: e.keys, manifest: e.data, sha: bridge.SHA256Hex(e.data), key: e.key, rules: d.rules()}
	req, verr := bridge.OpenRequest(e.data, e.id, d.keys.check(e.agent, e.keys))
	if errors.Is(verr, bcrypto.ErrBadSignature) || errors.Is(verr, bcrypto.ErrUnknownKey) {
		req, verr = d.invalidKey(e.data, e.id, e.agent, e.keys, verr)
	}
	if verr != nil && req == nil {
		if errors.Is(verr, bcrypto.ErrTruncated) {
			d.waiting(e.mpath, len(e.data), verr) // may still be arriving
			d.refusals.mark(e.mpath)              // until it changes, as it does while it arrives
		} else {
			d.refuseFile(e.mpath, verr)
			d.refusals.mark(e.mpath) // not authentic: no time makes it so
		}
		return false
	}
	e.j.req, e.refused = req, verr
	return true
}

// record is the ledger's check (§8.4): another manifest under a recorded
// id is a replay; a new id is recorded (deliver) inside its record window,
// and refused without an entry or a result outside it; a request refused
// for its times or key is answered so once recorded.
func (e *evaluation) record() bool {
	d, j := e.d, e.j
	if e.exists && e.ent.ManifestSHA256 != j.sha {
		d.refuseFile(e.mpath, fmt.Errorf("%w: %s was recorded with another manifest", bridge.ErrReplay, e.id))
		return false
	}
	e.expires = recordedExpiry(j.req)
	if verr := e.refused; !e.exists && verr != nil && outsideRecordWindow(j.req, e.expires, d.opt.Now(), d.opt.Skew) {
		// Refused, and either past its (effective) expiry beyond the skew
		// or created absurdly far ahead: the ledger may have forgotten the
		// id after it was answered (GC), or would have to keep it for
		// ever. Refuse it without an entry or a result, so it never gets a
		// second one. Whatever the reason it is refused for (a revoked or
		// expired key too), the times decide this.
		if !errors.Is(verr, bridge.ErrExpired) && d.opt.Now().After(e.expires.Add(d.opt.Skew)) {
			verr = fmt.Errorf("%w (and at %s: %w)", verr, e.expires.UTC().Format(time.RFC3339), bridge.ErrExpired)
		}
		d.refuseFile(e.mpath, verr)
		return false
	}
	if !e.exists {
		ent, ok := d.deliver(j, e.expires)
		if !ok || ent.State.Answered() {
			return false // not recorded, or record-lost: held for a human
		}
		e.ent = ent
	} else if d.ledger.Durable(e.key) {
		if err := d.out.keepManifest(j); err != nil {
			d.log.Error("keep manifest", "key", e.key, "err", err)
			return false
		}
		if d.adopt(j, e.ent) || d.holdBehind(j, e.ent) {
			return false
		}
	}
	if verr := e.refused; verr != nil { // authentic but refused for its times or key
		if errors.Is(verr, bridge.ErrExpired) {
			d.answer(j, evExpire, bridge.Receipt{Status: bridge.StatusExpired, Reason: "expired", Detail: verr.Error()}, nil, nil)
		} else {
			d.answer(j, evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(verr), Detail: verr.Error()}, nil, nil)
		}
		return false
	}
	return true
}

// inTime: not expired by the host's first sight plus the maximum queue age
// (§8.3's last clause, which needs the recorded entry), nor cancelled.
func (e *evaluation) inTime() bool {
	return !e.d.expired(e.j, e.ent) && !e.d.cancelledBefore(e.j)
}

// payload holds the payload to what this agent may send, then settles it
// into a private spool by its pinned length and hash, or leaves the request
// pending (§8.5), to be answered incomplete after the pending timeout.
func (e *evaluation) payload() bool {
	d, j := e.d, e.j
	if err := payloadBound(j); err != nil {
		d.answer(j, evRefuse, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Detail: err.Error(), PolicySHA256: d.pol().SHA256}, nil, nil)
		return false
	}
	in, err := d.settle(j)
	if err != nil {
		if e.ent.State == ledger.StateSeen {
			if _, err := d.step(e.key, evWaitPayload, nil); err != nil {
				d.log.Warn("ledger", "key", e.key, "err", err)
			}
		}
		if d.opt.Now().Sub(e.ent.FirstSeen) > d.opt.PendingTimeout {
			d.answer(j, evIncomplete, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.ReasonIncomplete,
				Detail: fmt.Sprintf("payload not complete after %s: %v", d.opt.PendingTimeout, err)}, nil, nil)
		} else {
			d.waiting(bridge.RequestPath(d.me, e.agent, e.id, bridge.ExtPayload), -1, err)
		}
		return false
	}
	e.in = in
	return true
}

// call decrypts and decodes the call from the settled spool, then holds
// it to the policy (§8.6–7): admit (admit.go) owns the spool from here, and
// decides what runs.
func (e *evaluation) call() bool {
	e.handed = e.d.admit(e.j, e.in, admitNew)
	return false
}

// deliver records an authentic request new to the ledger (event deliver),
// its manifest kept first. If the home or the folder shows that this host
// admitted the id before (a repaired or restored ledger lost its record),
// it is recorded uncertain instead (record-lost), and never runs again.
func (d *Daemon) deliver(j *job, expires time.Time) (ledger.Entry, bool) {
	e := ledger.Entry{Key: j.key, Agent: j.agent, ID: j.req.ID, State: ledger.StateSeen, ManifestSHA256: j.sha,
		FirstSeen: d.opt.Now(), Expires: expires, Manifest: j.manifest}
	why := d.evidence(j.agent, j.req.ID)
	// Kept before the record, under a name that is not evidence of
	// admission (unrecorded), and renamed once the record is in: recovery,
	// reconcile and the sweeps rebuild a request from it whether or not
	// its files are still in the folder, and a crash between the two
	// neither strands a record without its manifest nor makes a request
	// that never ran look admitted.
	if err := d.out.keepUnrecorded(j); err != nil {
		d.log.Error("keep manifest", "key", j.key, "err", err)
		return ledger.Entry{}, false
	}
	var lostStatus string
	ev := evDeliver
	if why != "" {
		// An answer before its record, as always: a crash in between
		// leaves the sealed copy, which is evidence itself. A result this
		// host signed is what happened: the entry records it, created in
		// its state (adopt) where the ledger can, else through uncertain
		// (record-lost, then catch-up, below).
		ev, e.State, e.Reason = evRecordLost, ledger.StateUncertain, string(bridge.ReasonRecordLost)
		e.ResultSHA256, lostStatus = d.answerLost(j, why, time.Time{})
		if st, ok := statusState[lostStatus]; ok && st != ledger.StateUncertain && ledger.CanAdmit(st) {
			ev, e.State = evAdopt, st
		}
	}
	// Seen need not be on disk before anything: a crash that loses it
	// leaves a request that is evaluated again from its kept copy (DESIGN
	// §3, invariant 3). Running is durable, and takes it along.
	ent, created, err := d.create(ev, e, why != "")
	if errors.Is(err, ledger.ErrConflict) {
		d.refuseFile(bridge.RequestPath(d.me, j.agent, j.req.ID, bridge.ExtManifest), fmt.Errorf("%w: %s", bridge.ErrReplay, j.req.ID))
		return ent, false
	} else if err != nil {
		d.log.Error("ledger admit", "key", j.key, "err", err)
		return ent, false
	}
	d.noteState(ent.State)
	if d.ledger.Durable(j.key) {
		if err := d.out.keepManifest(j); err != nil {
			d.log.Warn("keep manifest", "key", j.key, "err", err) // its unrecorded copy serves
		}
	} // else renamed once the record is on disk (keptDurable)
	switch {
	case !created:
	case why == "":
		d.audit.log(AuditEvent{Event: "seen", Agent: j.agent, ID: j.req.ID})
	default:
		d.markFinished(j.agent, j.req.ID)
		d.fin.forgetLost(j.key)
		d.audit.log(AuditEvent{Event: "record-lost", Agent: j.agent, ID: j.req.ID, Detail: why})
		if st := statusState[lostStatus]; ent.State == ledger.StateUncertain && ledger.CanTransition(ledger.StateUncertain, st) {
			d.log.Warn("a request this host answered came back, and the ledger had no record of it: recording the answer it signed",
				"key", j.key, "result", lostStatus)
			d.probe.Event(string(evCatchUp))
			d.record(j, evCatchUp, ent.State, ent.ResultSHA256, bridge.Receipt{Status: lostStatus, Reason: bridge.ReasonRecordLost}, false)
			ent, _ = d.ledger.Get(j.key)
			return ent, true
		}
		if ent.State != ledger.StateUncertain {
			d.log.Warn("a request this host answered came back, and the ledger had no record of it: recorded the answer it signed",
				"key", j.key, "result", lostStatus)
			return ent, true
		}
		d.log.Error("a request this host admitted before came back, and the ledger had no record of it: held uncertain, never run again",
			"key", j.key, "evidence", why, "hint", "bridge reconcile "+j.keys.name+"/"+j.req.ID+" --as done|failed|rerun")
	}
	return ent, true
}

// answerLost tells the agent about a request held uncertain because its
// record was lost, unless it holds an answer already: a result of this
// host in the folder (re-published from the private copy if there is one)
// or an ack of one. It returns the hash and status of the result the agent
// holds or was sent (none if it acked one and none is in the folder).
func (d *Daemon) answerLost(j *job, why string, notBefore time.Time) (resSHA, status string) {
	if sha, status, ok := d.out.folderResult(j.agent, j.req.ID, j.sha, notBefore); ok && !d.out.keptNewer(j, sha) {
		// Kept as the private copies, as catch-up keeps it: should the
		// folder's go (lost, replaced), it is published again, not sealed
		// anew. (A power cut that lost a refused request's lazy record
		// after its refusal was out leaves the folder's copy alone.) A
		// copy the home keeps that is newer (a human's rerun answered
		// since, and a folder writer put the older answer back) is never
		// replaced: it stands, and is published again below.
		d.out.keepFolderResult(j.agent, j.req.ID)
		return sha, status
	}
	if d.out.sealedFor(j) {
		resSHA, status, err := d.out.publishResult(j, bridge.Receipt{}, runner.Output{}, runner.Output{})
		if err != nil {
			d.log.Warn("re-publish result", "key", j.key, "err", err)
		}
		return resSHA, status
	}
	if _, ok := d.gc.agentAck(j.agent, j.req.ID); ok {
		return "", "" // the agent holds an answer, and took its files away
	}
	rc := bridge.Receipt{Status: bridge.StatusUncertain, Reason: bridge.ReasonRecordLost, PolicySHA256: d.pol().SHA256,
		Detail: "the host's ledger lost this request's record (a repaired or restored ledger), and the host admitted it before (" +
			why + "): it may have run. A human on the host settles it with `bridge reconcile`"}
	resSHA, status, err := d.out.publishResult(j, rc, runner.Output{}, runner.Output{})
	if err != nil {
		d.log.Error("publish result", "key", j.key, "err", err)
		return "", ""
	}
	return resSHA, status
}

// evaluateKept looks at a request the ledger holds past its delivery
// (awaiting approval, claimed, running) when its key is free: nothing in
// this process works on it. A result sealed for it is published and
// recorded (a crash or a failed publish between the two); a cancel of a
// request awaiting approval answers it.
func (d *Daemon) evaluateKept(ent ledger.Entry, keys *agentKeys) {
	j, err := d.reload(ent, keys)
	if err != nil {
		d.noteFolder(ent.Key, "reload:"+ent.Key, "cannot reload the admitted manifest", "key", ent.Key, "err", err)
		return
	}
	if d.adopt(j, ent) || ent.State == ledger.StateRunning || d.holdBehind(j, ent) {
		return
	}
	if ent.State == ledger.StateAwaitingApproval {
		d.decideWaiting(j, ent)
	}
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
		c := d.keys.check(agent, keys)
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

// expired answers a request that is past its signed expiry or waited on
// the host longer than MaxQueueAge, and reports whether it did.
func (d *Daemon) expired(j *job, ent ledger.Entry) bool {
	now := d.opt.Now()
	rc := bridge.Receipt{Status: bridge.StatusExpired, Reason: "expired"}
	switch {
	case !now.Before(time.Unix(j.req.Expires, 0)):
		rc.Detail = "expired before it could run"
	case now.Sub(ent.FirstSeen) > d.opt.MaxQueueAge:
		rc.Detail = fmt.Sprintf("waited on the host for more than %s", d.opt.MaxQueueAge)
	default:
		return false
	}
	d.answer(j, evExpire, rc, nil, nil)
	return true
}

// cancelledBefore answers a request whose agent cancelled it before it ran.
func (d *Daemon) cancelledBefore(j *job) bool {
	if !d.cancelled(j.agent, j.req.ID) {
		return false
	}
	d.answer(j, evCancelEarly, bridge.Receipt{Status: bridge.StatusCancelled, Reason: bridge.ReasonCancelled, Detail: "cancelled before it ran"}, nil, nil)
	return true
}

// The kept manifest of a request (operator.KeptManifestPath): the
// evidence of admission of evidence.go, read by `bridge approve` too.
func (o *outbox) keptPath(agent, id, ext string) string {
	return operator.KeptManifestPath(o.home, agent, id, ext)
}

// keepUnrecorded keeps a manifest about to be recorded. It is written
// without an fsync: the ledger's record carries the manifest's bytes until
// the request is answered (ledger.Entry.Manifest), and that is what reload
// and `bridge approve` read; this copy is the evidence a lost ledger leaves
// (evidence.go). A power cut can leave it torn, empty or without its name,
// never wrong: every reader checks its hash, and recovery writes it again
// (restoreKept).
func (o *outbox) keepUnrecorded(j *job) error {
	if err := os.MkdirAll(o.home.Path("manifests", j.agent), 0o700); err != nil {
		return err
	}
	o.probe.Unsynced(o.keptPath(j.agent, j.req.ID, operator.ExtUnrecorded), o.keptPath(j.agent, j.req.ID, bridge.ExtManifest))
	return syncsafe.WriteFileUnsynced(o.keptPath(j.agent, j.req.ID, operator.ExtUnrecorded), j.manifest)
}

// keepManifest keeps the admitted manifest of a recorded request in the
// home, once: its unrecorded copy renamed, or written anew, without an
// fsync as keepUnrecorded. (The rename needs no directory fsync: lost to a
// crash, the copy is found under its first name.)
func (o *outbox) keepManifest(j *job) error {
	p := o.keptPath(j.agent, j.req.ID, bridge.ExtManifest)
	if data, err := os.ReadFile(p); err == nil && bridge.SHA256Hex(data) == j.sha {
		return nil
	}
	if err := os.Rename(o.keptPath(j.agent, j.req.ID, operator.ExtUnrecorded), p); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	o.probe.Unsynced(p)
	return syncsafe.WriteFileUnsynced(p, j.manifest)
}

// restoreKept makes the kept manifest of a recorded request whole again
// from the bytes its record carries, fsynced this time, if the home's copy
// does not read back as them (a power cut emptied it, or took its name):
// recovery calls it before the record may drop them (an answer), so the
// evidence a lost ledger would leave (evidence.go) survives the cut. A
// record without them (written before the ledger carried them) has a copy
// that was fsynced: nothing to do.
func (o *outbox) restoreKept(ent ledger.Entry) {
	if ent.Manifest == nil {
		return
	}
	kept, unrecorded := o.keptPath(ent.Agent, ent.ID, bridge.ExtManifest), o.keptPath(ent.Agent, ent.ID, operator.ExtUnrecorded)
	if data, err := os.ReadFile(kept); err == nil && bridge.SHA256Hex(data) == ent.ManifestSHA256 {
		return
	}
	// The record is on disk (recovery reads it from the file), so the
	// name of evidence is the right one.
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		o.log.Warn("restore the kept manifest", "key", ent.Key, "err", err)
		return
	}
	if err := syncsafe.WriteFileAtomic(kept, ent.Manifest); err != nil {
		o.log.Warn("restore the kept manifest", "key", ent.Key, "err", err)
		return
	}
	os.Remove(unrecorded)
}

// keptDurable renames the unrecorded copy of a request's manifest to its
// kept name once the ledger's record of it is on disk: the kept name is
// evidence of admission (evidence.go), and a record lost to a crash with
// the name in place would hold a request that never ran as uncertain.
func (o *outbox) keptDurable(key string) {
	agent, id, _ := strings.Cut(key, "/")
	p := o.keptPath(agent, id, bridge.ExtManifest)
	if _, err := os.Stat(p); err == nil {
		return
	}
	os.Rename(o.keptPath(agent, id, operator.ExtUnrecorded), p) // absent: kept already, or never
}

// settle copies the payload into a private spool if it matches the pin.
func (d *Daemon) settle(j *job) (spool, error) {
	// A spool of its own per evaluation: two evaluations of one id
	// (harmless by design, invariant 6) must not share a copy.
	f, err := newSpool(d.home.Path("spool"), j.req.ID, bridge.ExtPayload, j.req.Payload.Len)
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

// cancelled reports whether a verified cancel file exists for the request.
func (d *Daemon) cancelled(agent, id string) bool {
	p := bridge.RequestPath(d.me, agent, id, bridge.ExtCancel)
	d.probe.Add(probe.CancelReads)
	data, err := d.folder.ReadFile(p, bcrypto.KindCancel.MaxSize())
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.refuseFile(p, err)
			d.refusals.mark(p) // read again once it changes, not at every rescan
		}
		return false
	}
	keys := d.agents()[agent]
	if keys == nil {
		return false
	}
	if _, err = bridge.OpenCancel(data, id, d.me, agent, keys.sign(d.opt.Now())); err != nil {
		switch _, aerr := bridge.OpenCancel(data, id, d.me, agent, keys.allSign()); {
		case errors.Is(err, bcrypto.ErrTruncated):
		case aerr == nil:
			// The agent's own, signed by a key revoked or rotated out since
			// (often an old cancel, long answered): not a forgery.
			d.noteFolder(p, "old-key:"+p, "ignoring a cancel signed by a key of the agent that is no longer valid", "file", p)
		default:
			d.refuseFile(p, err)
		}
		// None of these becomes valid as it is (a key revoked or rotated
		// out stays so; a cancel still arriving changes its version): a
		// rescan need not read it again until it changes (refused.go).
		d.refusals.mark(p)
		return false
	}
	return true
}

// handleCancel stops a running op whose agent cancelled it, or evaluates
// the request again so a cancel before it started is answered.
func (d *Daemon) handleCancel(agent, id string) {
	if !d.cancelled(agent, id) {
		return
	}
	key := agent + "/" + id
	d.mu.Lock()
	cancel := d.cancels[key]
	d.mu.Unlock()
	if cancel != nil {
		if d.firstTime("cancelling:" + key) { // each rescan sees the cancel file again
			d.log.Info("cancelling", "key", key)
		}
		cancel()
		return
	}
	d.sched.schedule(agent, id)
}

// reload re-reads and re-verifies the manifest a ledger entry admitted,
// from the host's private copy. The signature is checked again, under any
// generation of the agent's keys, revoked ones too: the request was
// authentic when admitted, and reload only rebuilds it. Whether it may
// still start is standing's to say; the times are not checked again.
func (d *Daemon) reload(ent ledger.Entry, keys *agentKeys) (*job, error) {
	data := ent.Manifest // the ledger checked its hash at Admit
	if data == nil {
		// Recorded before the ledger carried it: its copy was fsynced then.
		var err error
		data, err = os.ReadFile(d.out.keptPath(ent.Agent, ent.ID, bridge.ExtManifest))
		if errors.Is(err, fs.ErrNotExist) {
			data, err = os.ReadFile(d.out.keptPath(ent.Agent, ent.ID, operator.ExtUnrecorded)) // a crash before the rename
		}
		if err != nil {
			return nil, err
		}
	}
	if bridge.SHA256Hex(data) != ent.ManifestSHA256 {
		return nil, fmt.Errorf("%w: the kept manifest changed", bridge.ErrReplay)
	}
	c := d.keys.check(ent.Agent, keys)
	c.AgentKeys = keys.allSign()
	c.AgentBoxKid = func(kid string) bool { _, ok := keys.boxPub(kid); return ok }
	req, err := bridge.OpenRequest(data, ent.ID, c)
	if req == nil {
		return nil, err
	}
	return &job{agent: ent.Agent, keys: keys, req: req, manifest: data, sha: ent.ManifestSHA256, key: ent.Key, rules: d.rules()}, nil
}
