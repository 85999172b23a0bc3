package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
)

// Human approval: an op with `approve = true` waits in awaiting-approval
// until `bridge approve ID` or `bridge deny ID`, or until the approval TTL
// passes. The agent is told by an inbox notice; the host's user by
// `bridge pending` and, where the OS offers one, a desktop notification.

// DefaultApprovalTTL is how long a request waits for a human by default.
const DefaultApprovalTTL = time.Hour

// ReasonApprovalMismatch is the reason of an approved request that was not
// run because what it would run changed since the human was shown it.
const ReasonApprovalMismatch = bridge.ReasonApprovalMismatch

// ReasonPolicyChanged answers a request the host claimed and that waited for
// a slot of its op while the policy changed so that it would no longer run
// as admitted (reload.go).
const ReasonPolicyChanged = bridge.ReasonPolicyChanged

// approvalText is what `bridge pending` shows a human about a request that
// waits for approval, and what the approval is bound to: the rendered argv,
// reconcile, directory, environment names, timeout, output and input caps,
// and arguments. Environment values are not in it (they may be secrets,
// and the ledger must not hold them); they come from the daemon's own
// environment, not from the request.
func approvalText(inv *policy.Invocation) string {
	return "awaits a human's approval; it would run:\n" + strings.TrimSuffix(inv.String(), "\n")
}

// approvedAsShown reports whether an approved request would run exactly
// what the human was shown when it was parked. Approval is a decision about
// that text, not about the id: path arguments are resolved again (a
// symlink may point elsewhere now), the policy may have changed across a
// restart, a program may resolve to another file in PATH. Anything else
// must be asked again, never run.
func (w *policyWatch) approvedAsShown(j *job, inv *policy.Invocation) bool {
	e, err := w.ledger.Get(j.key)
	if err != nil {
		return false
	}
	if e.Reason != approvalText(inv) {
		w.log.Warn("approved request not run: what it would run changed since it was shown", "key", j.key, "op", inv.Op)
		w.audit.log(AuditEvent{Event: "approval-mismatch", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: policy.QuoteArgv(inv.Argv)})
		return false
	}
	return true
}

// awaitApproval parks a request for a human: the ledger records what it
// would run (shown by `bridge pending`, and bound to the approval by
// approvedAsShown), the agent gets a notice.
func (d *Daemon) awaitApproval(j *job, inv *policy.Invocation, stdin io.ReadSeeker, n int64) bool {
	if n > 0 {
		d.out.keepApprovalInput(j, stdin) // before it is listed: `bridge pending` shows it
	}
	what := approvalText(inv)
	if _, err := d.step(j.key, evAwaitApproval, func(e *ledger.Entry) { e.Op, e.Reason = inv.Op, what }); err != nil {
		d.log.Warn("await approval", "key", j.key, "err", err)
		return false
	}
	ref := j.keys.name + "/" + j.req.ID
	d.audit.log(AuditEvent{Event: "awaiting-approval", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: policy.QuoteArgv(inv.Argv)})
	d.log.Info("waiting for approval", "agent", j.keys.name, "id", j.req.ID, "op", inv.Op, "hint", "bridge approve "+ref)
	d.out.notify(j.agent, bridge.Note{Event: bridge.EventApprovalPending, Request: j.req.ID,
		Text: fmt.Sprintf("request %s (%s) waits for a human on the host to approve it", j.req.ID, inv.Op)})
	desktopNotify("bridge: approval needed", fmt.Sprintf("%s asks to run %s (bridge approve %s)", j.keys.name, inv.Op, ref))
	return false
}

// desktopNotify shows a notification where the OS offers one, and is
// silently skipped otherwise.
func desktopNotify(title, body string) {
	var cmd []string
	switch runtime.GOOS {
	case "linux", "freebsd", "openbsd":
		// Found as an op's program is (never where another user could
		// have put one: it would run as the daemon's user at every
		// approval, with text an agent chose).
		if p, err := policy.LookPath("notify-send"); err == nil {
			cmd = []string{p, title, body}
		}
	case "darwin":
		esc := func(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }
		if p, err := policy.LookPath("osascript"); err == nil {
			cmd = []string{p, "-e", fmt.Sprintf(`display notification "%s" with title "%s"`, esc(body), esc(title))}
		}
	}
	if cmd == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		exec.CommandContext(ctx, cmd[0], cmd[1:]...).Run()
	}()
}

// errBusy: the request's key is in use (being evaluated); the order is
// applied at the next tick.
var errBusy = errors.New("the request is busy; trying again")

// decide applies a human's decision on a request awaiting approval. The
// key is taken first, so nothing else answers it meanwhile.
func (d *Daemon) decide(key string, approve bool, why string) error {
	if !d.sched.take(key) {
		return errBusy
	}
	handed := false
	defer func() {
		if !handed {
			d.sched.release(key)
		}
	}()
	e, err := d.ledger.Get(key)
	if err != nil {
		return err
	}
	if e.State != ledger.StateAwaitingApproval {
		return fmt.Errorf("request %s is %s, not %s", key, e.State, ledger.StateAwaitingApproval)
	}
	keys := d.agents()[e.Agent]
	if keys == nil {
		return fmt.Errorf("request %s: agent %s is no longer trusted", key, e.Agent)
	}
	if approve && d.sched.ceil.concurrentFull(keys.name) {
		// The agent runs as many ops as max_concurrent allows: the
		// approval waits for a place (the order is tried again each
		// second) instead of being refused "ceiling", which would throw
		// the human's decision away (red team of the presets, whose
		// agent runs one op at a time).
		return errBusy
	}
	j, err := d.reload(e, keys)
	if err != nil {
		return err
	}
	// Decided: it waits no more, whatever comes of it (gone before the
	// answer, which the agent may read at once).
	d.out.dropApprovalInput(key)
	if !approve {
		d.audit.log(AuditEvent{Event: "denied", Agent: e.Agent, ID: e.ID, Op: e.Op, Detail: why})
		detail := "a human on the host denied it"
		if why != "" {
			detail += ": " + why
		}
		return d.answer(j, evDeny, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.ReasonDenied, Op: e.Op, Detail: detail}, nil, nil)
	}
	// What may have happened since it was parked answers it instead.
	if d.holdBehind(j, e) || d.decideWaiting(j, e) {
		return fmt.Errorf("request %s was answered before the approval: %s", key, stateOf(d.ledger, key))
	}
	d.audit.log(AuditEvent{Event: "approved", Agent: e.Agent, ID: e.ID, Op: e.Op})
	// The agent learns who approved it and when (its MCP result says so;
	// a denial says it in the answer itself).
	d.out.notify(e.Agent, bridge.Note{Event: bridge.EventApproved, Request: e.ID,
		Text: fmt.Sprintf("request %s (%s) was approved on the host at %s by %s", e.ID, e.Op, d.opt.Now().UTC().Format(time.DateTime+" UTC"), approver())})
	in, err := d.settle(j)
	if err != nil {
		return fmt.Errorf("approve %s: the payload is no longer there: %w", key, err)
	}
	handed = d.admit(j, in, admitApproved)
	return nil
}

// decideWaiting answers a request awaiting approval that can no longer be
// approved: its agent cancelled it, its key was revoked, or nobody
// approved it within the TTL. It reports whether it answered.
func (d *Daemon) decideWaiting(j *job, e ledger.Entry) bool {
	ttl := d.opt.ApprovalTTL
	if ttl <= 0 {
		ttl = DefaultApprovalTTL
	}
	ends := func() { d.out.dropApprovalInput(j.key) } // before the answer, as in decide
	switch err := d.standing(j); {
	case d.cancelled(j.agent, j.req.ID):
		ends()
		d.answer(j, evCancelEarly, bridge.Receipt{Status: bridge.StatusCancelled, Reason: bridge.ReasonCancelled, Op: e.Op, Detail: "cancelled while it waited for approval"}, nil, nil)
	case err != nil:
		ends()
		d.answer(j, evRevoke, bridge.Receipt{Status: bridge.StatusRejected, Reason: bridge.Reason(err), Op: e.Op, Detail: err.Error()}, nil, nil)
	case !d.opt.Now().Before(time.Unix(j.req.Expires, 0)):
		ends()
		// Its own validity ended while it waited: an approval now must
		// not run what the agent no longer asks for.
		d.answer(j, evApprovalTTL, bridge.Receipt{Status: bridge.StatusExpired, Reason: bridge.ReasonPastExpiry, Op: e.Op,
			Detail: "its validity ended while it waited for approval"}, nil, nil)
	case d.opt.Now().Sub(e.Updated) >= ttl:
		ends()
		d.answer(j, evApprovalTTL, bridge.Receipt{Status: bridge.StatusExpired, Reason: bridge.ReasonApprovalExpired, Op: e.Op,
			Detail: fmt.Sprintf("nobody approved it within %s", ttl)}, nil, nil)
	default:
		return false
	}
	return true
}

// stateOf is the ledger state of key, for messages.
func stateOf(l *ledger.Ledger, key string) ledger.State {
	e, _ := l.Get(key)
	return e.State
}

// approver names who approves on this host: the account whose `bridge
// approve` the daemon carries out (a home is one account's).
func approver() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "the host account " + u.Username
	}
	return fmt.Sprintf("the host account with uid %d", os.Getuid())
}
