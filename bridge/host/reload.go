package host

import (
	"errors"
	"fmt"
	"os"
	"reflect"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/trust"
)

// rules is the policy in force and what is built from it. A reload
// replaces it whole; an evaluation takes it once at its start (job.rules),
// so one request is never judged by two policies.
type rules struct {
	p     *policy.Policy
	red   *redactor // nil: redaction off
	stamp version   // of the file it was loaded from
}

// loadPolicy loads the policy file with the version it had before it was
// read: a write that lands while it is read changes the version again, so
// the next check loads it once more.
func loadPolicy(file string) (*policy.Policy, version, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, version{}, fmt.Errorf("load policy: %w", err)
	}
	p, err := policy.Load(file)
	return p, versionOf(fi), err
}

// redactorFor is what redacts a job's output: the patterns of the policy
// it was admitted under and of the one in force now. A reload that adds a
// pattern (someone saw a secret go by) applies to the ops running already,
// and one that drops a pattern does not unveil what they print.
func (b *base) redactorFor(j *job) *redactor {
	now := b.rules().red
	if j == nil || j.rules == nil || j.rules.red == now || j.rules.red == nil {
		return now
	}
	if now == nil {
		return j.rules.red
	}
	res := append([]secretPattern{}, now.res...)
	for _, sp := range j.rules.red.res {
		if !hasPattern(res, sp) {
			res = append(res, sp)
		}
	}
	return &redactor{res: res}
}

func hasPattern(res []secretPattern, sp secretPattern) bool {
	for _, r := range res {
		if r.re.String() == sp.re.String() {
			return true
		}
	}
	return false
}

// policyWatch reloads the policy when its file changes, and judges a
// request admitted under an earlier policy against the one in force.
type policyWatch struct {
	*base
	sched *scheduler // the ops' concurrency limits
	out   *outbox    // what the agents are shown of a change
	// The policy file's version last seen and last refused, for the
	// control loop's reload.
	seen   settle
	failed version
}

// check reloads the policy when its file changed and has stayed
// the same for one control tick (an editor that writes in several steps is
// not read half-way). A file that does not load leaves the policy in force
// as it is, with one error line per version of the file; `bridge doctor`
// says the same from the file. It reports whether another policy took
// force.
func (w *policyWatch) check() (changed bool) {
	file := w.home.Path(trust.PolicyName)
	fi, err := os.Stat(file)
	cur := w.rules()
	if err != nil {
		if w.firstTime("policy-missing") {
			w.log.Error("policy file gone: the policy loaded before stays in force until a valid one is written", "file", file, "err", err)
		}
		return false
	}
	if !w.seen.settled(versionOf(fi), cur.stamp) {
		return false
	}
	p, stamp, err := loadPolicy(file)
	if err != nil {
		if stamp != w.failed {
			w.failed = stamp
			w.log.Error("the changed policy does not load: the one loaded before stays in force", "file", file, "err", err,
				"hint", "bridge policy check")
			w.audit.log(AuditEvent{Event: "policy-reload", Detail: "refused: " + err.Error()})
		}
		return false
	}
	wasFailed := w.failed != version{}
	w.failed = version{}
	w.rulesP.Store(&rules{p: p, red: newRedactor(p.Redaction()), stamp: stamp})
	if p.SHA256 == cur.p.SHA256 {
		if wasFailed {
			// The error line said the file did not load; say that it does
			// again (a new user's trial: the fix went unremarked), and that
			// nothing changed.
			w.log.Info("the policy file loads again: the same policy as in force, nothing changed", "policy", p.SHA256[:12])
			w.audit.log(AuditEvent{Event: "policy-reload", Detail: "loads again, unchanged: policy " + p.SHA256})
		}
		return false // touched, not changed
	}
	w.sched.relimit(p)
	w.log.Info("policy reloaded", "policy", p.SHA256[:12], "was", cur.p.SHA256[:12])
	for _, warning := range p.PathWarnings() {
		w.log.Warn("policy: "+warning, "hint", "`bridge policy check` lists every warning")
	}
	w.audit.log(AuditEvent{Event: "policy-reload", Detail: "policy " + p.SHA256})
	if err := w.out.publishForAgents(); err != nil {
		w.log.Warn("publish catalog", "err", err)
	}
	w.out.policyChanged()
	w.out.notify("", bridge.Note{Event: bridge.EventPolicyChanged, Text: "the host's policy changed; `bridge ops` shows what you may run now"})
	return true
}

// settle remembers the version of a file last seen, so that a change is
// acted on once the file has kept it for one check.
type settle struct{ seen version }

// settled reports whether v differs from the version in force and was
// already seen at the previous check.
// unsettled reports whether the policy file was seen changed and is
// to be read once it stays so (the next check reads it).
func (w *policyWatch) unsettled() bool {
	cur := w.rules()
	return cur != nil && w.seen.seen != cur.stamp && w.seen.seen != w.failed
}

func (s *settle) settled(v, inForce version) bool {
	if v == inForce {
		s.seen = v
		return false
	}
	if v != s.seen {
		s.seen = v // read it at the next check if it stays so
		return false
	}
	return true
}

// errPolicyChanged answers a claimed request whose op the policy changed
// while it waited for a slot of its op.
var errPolicyChanged = errors.New("the host's policy changed while the request waited for its op to be free")

// stillAsAdmitted reports whether a request admitted under an earlier
// policy would be run exactly so under the one in force now (nil), or why
// not. A request that waited for a slot must not start what the policy no
// longer allows, nor anything other than what it was admitted (and maybe
// approved) to run.
func (w *policyWatch) stillAsAdmitted(j *job, inv *policy.Invocation) error {
	now := w.rules()
	if j.rules == nil || now == j.rules || now.p.SHA256 == j.rules.p.SHA256 {
		return nil
	}
	fresh, err := now.p.Render(j.keys.name, inv.Op, j.args, policy.RenderContext{Env: w.opt.Env, Vars: map[string]string{"request_id": j.req.ID}})
	if err != nil {
		return fmt.Errorf("%w: %w", errPolicyChanged, err)
	}
	fresh.SetRequestEnv(j.req.ID)
	// How many may run at once is when it runs, not what runs.
	fresh.Concurrency = inv.Concurrency
	if !reflect.DeepEqual(fresh, inv) {
		return fmt.Errorf("%w: it would now run differently (its command, directory, environment, limits or approval changed)", errPolicyChanged)
	}
	return nil
}
