package host

import (
	"errors"
	"fmt"
	"math"
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

func (d *Daemon) rules() *rules       { return d.rulesP.Load() }
func (d *Daemon) pol() *policy.Policy { return d.rules().p }

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
func (d *Daemon) redactorFor(j *job) *redactor {
	now := d.rules().red
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

// checkPolicyFile reloads the policy when its file changed and has stayed
// the same for one control tick (an editor that writes in several steps is
// not read half-way). A file that does not load leaves the policy in force
// as it is, with one error line per version of the file; `bridge doctor`
// says the same from the file.
func (d *Daemon) checkPolicyFile() {
	file := d.home.Path(trust.PolicyName)
	fi, err := os.Stat(file)
	cur := d.rules()
	if err != nil {
		if d.firstTime("policy-missing") {
			d.log.Error("policy file gone: the policy loaded before stays in force until a valid one is written", "file", file, "err", err)
		}
		return
	}
	if !d.policySeen.settled(versionOf(fi), cur.stamp) {
		return
	}
	p, stamp, err := loadPolicy(file)
	if err != nil {
		if stamp != d.policyFailed {
			d.policyFailed = stamp
			d.log.Error("the changed policy does not load: the one loaded before stays in force", "file", file, "err", err,
				"hint", "bridge policy check")
			d.audit.log(AuditEvent{Event: "policy-reload", Detail: "refused: " + err.Error()})
		}
		return
	}
	wasFailed := d.policyFailed != version{}
	d.policyFailed = version{}
	d.rulesP.Store(&rules{p: p, red: newRedactor(p.Redaction()), stamp: stamp})
	if p.SHA256 == cur.p.SHA256 {
		if wasFailed {
			// The error line said the file did not load; say that it does
			// again (a new user's trial: the fix went unremarked), and that
			// nothing changed.
			d.log.Info("the policy file loads again: the same policy as in force, nothing changed", "policy", p.SHA256[:12])
			d.audit.log(AuditEvent{Event: "policy-reload", Detail: "loads again, unchanged: policy " + p.SHA256})
		}
		return // touched, not changed
	}
	d.mu.Lock()
	for op, s := range d.slots {
		// A raised limit frees its waiters now; a removed op's waiters
		// stay until a slot frees, and are then refused (stillAsAdmitted).
		switch c, ok := p.Concurrency(op); {
		case ok && c > 0:
			s.limit = c
		case ok:
			s.limit = math.MaxInt
		}
		d.grantSlots(s)
	}
	d.mu.Unlock()
	d.log.Info("policy reloaded", "policy", p.SHA256[:12], "was", cur.p.SHA256[:12])
	for _, w := range p.PathWarnings() {
		d.log.Warn("policy: "+w, "hint", "`bridge policy check` lists every warning")
	}
	d.audit.log(AuditEvent{Event: "policy-reload", Detail: "policy " + p.SHA256})
	if err := d.publishForAgents(); err != nil {
		d.log.Warn("publish catalog", "err", err)
	}
	d.policyChanged()
	d.notify("", bridge.Note{Event: bridge.EventPolicyChanged, Text: "the host's policy changed; `bridge ops` shows what you may run now"})
	// What waits for an approval or a slot is judged again when it moves
	// (approvedAsShown, stillAsAdmitted); what waits to be claimed is
	// evaluated afresh.
	d.sweepWaiting()
}

// settle remembers the version of a file last seen, so that a change is
// acted on once the file has kept it for one check.
type settle struct{ seen version }

// settled reports whether v differs from the version in force and was
// already seen at the previous check.
// policyUnsettled reports whether the policy file was seen changed and is
// to be read once it stays so (the next check reads it).
func (d *Daemon) policyUnsettled() bool {
	cur := d.rules()
	return cur != nil && d.policySeen.seen != cur.stamp && d.policySeen.seen != d.policyFailed
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
func (d *Daemon) stillAsAdmitted(j *job, inv *policy.Invocation) error {
	now := d.rules()
	if j.rules == nil || now == j.rules || now.p.SHA256 == j.rules.p.SHA256 {
		return nil
	}
	fresh, err := now.p.Render(j.keys.name, inv.Op, j.args, policy.RenderContext{Env: d.opt.Env, Vars: map[string]string{"request_id": j.req.ID}})
	if err != nil {
		return fmt.Errorf("%w: %w", errPolicyChanged, err)
	}
	withRequestEnv(fresh, j.req.ID)
	// How many may run at once is when it runs, not what runs.
	fresh.Concurrency = inv.Concurrency
	if !reflect.DeepEqual(fresh, inv) {
		return fmt.Errorf("%w: it would now run differently (its command, directory, environment, limits or approval changed)", errPolicyChanged)
	}
	return nil
}
