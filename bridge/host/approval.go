package host

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
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

// awaitApproval parks a request for a human: the ledger records what it
// would run (shown by `bridge pending`), the agent gets a notice.
func (d *Daemon) awaitApproval(j *job, inv *policy.Invocation) bool {
	what := "would run: " + inv.String()
	if _, err := d.ledger.Transition(j.key, []ledger.State{ledger.StateSeen, ledger.StatePending}, ledger.StateAwaitingApproval,
		func(e *ledger.Entry) { e.Op, e.Reason = inv.Op, what }); err != nil {
		d.log.Debug("await approval", "key", j.key, "err", err)
		return false
	}
	d.audit.log(AuditEvent{Event: "awaiting-approval", Agent: j.agent, ID: j.req.ID, Op: inv.Op, Detail: strings.Join(inv.Argv, " ")})
	d.log.Info("waiting for approval", "agent", j.keys.name, "id", j.req.ID, "op", inv.Op, "hint", "bridge approve "+j.req.ID)
	d.notify(j.agent, bridge.Note{Event: "approval-pending", Request: j.req.ID,
		Text: fmt.Sprintf("request %s (%s) waits for a human on the host to approve it", j.req.ID, inv.Op)})
	desktopNotify("bridge: approval needed", fmt.Sprintf("%s asks to run %s (bridge approve %s)", j.keys.name, inv.Op, j.req.ID[:8]))
	return false
}

// desktopNotify shows a notification where the OS offers one, and is
// silently skipped otherwise.
func desktopNotify(title, body string) {
	var cmd []string
	switch runtime.GOOS {
	case "linux", "freebsd", "openbsd":
		if _, err := exec.LookPath("notify-send"); err == nil {
			cmd = []string{"notify-send", title, body}
		}
	case "darwin":
		esc := func(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }
		cmd = []string{"osascript", "-e", fmt.Sprintf(`display notification "%s" with title "%s"`, esc(body), esc(title))}
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

// decide applies a human's decision on a request awaiting approval.
func (d *Daemon) decide(id string, approve bool, why string) error {
	all, err := d.ledger.List(func(e ledger.Entry) bool { return e.ID == id })
	if err != nil {
		return err
	}
	e, err := entryIn(all, id, ledger.StateAwaitingApproval)
	if err != nil {
		return err
	}
	keys := d.agents()[e.Agent]
	if keys == nil {
		return fmt.Errorf("request %s: agent %s is no longer trusted", id, e.Agent)
	}
	j, err := d.reload(*e, keys, !approve)
	if err != nil {
		return err
	}
	if !approve {
		d.audit.log(AuditEvent{Event: "denied", Agent: e.Agent, ID: id, Op: e.Op, Detail: why})
		detail := "a human on the host denied it"
		if why != "" {
			detail += ": " + why
		}
		d.finish(j, bridge.Receipt{Status: bridge.StatusRejected, Reason: "denied", Op: e.Op, Detail: detail})
		return nil
	}
	d.audit.log(AuditEvent{Event: "approved", Agent: e.Agent, ID: id, Op: e.Op})
	in, err := d.settle(j)
	if err != nil {
		return fmt.Errorf("approve %s: the payload is no longer there: %w", id, err)
	}
	d.mu.Lock()
	d.active[e.Key] = true
	d.mu.Unlock()
	if !d.admit(j, in, admitApproved) {
		d.release(e.Key)
	}
	return nil
}

// expireApprovals ends requests that waited for approval longer than the TTL.
func (d *Daemon) expireApprovals() {
	ttl := d.opt.ApprovalTTL
	if ttl <= 0 {
		ttl = DefaultApprovalTTL
	}
	waiting, err := d.ledger.InState(ledger.StateAwaitingApproval)
	if err != nil {
		return
	}
	for _, e := range waiting {
		if d.opt.Now().Sub(e.Updated) < ttl {
			continue
		}
		keys := d.agents()[e.Agent]
		if keys == nil {
			continue
		}
		if j, err := d.reload(e, keys, true); err == nil {
			d.finish(j, bridge.Receipt{Status: bridge.StatusExpired, Reason: "approval-expired", Op: e.Op,
				Detail: fmt.Sprintf("nobody approved it within %s", ttl)})
		}
	}
}

// Approve and Deny hand a human's decision to the daemon (it applies it
// within a second, or at its next start).
func Approve(h *bridge.Home, id string) (*LedgerEntry, error) {
	return decideOrder(h, id, "approve", "")
}

// Deny refuses a request awaiting approval; why is passed to the agent.
func Deny(h *bridge.Home, id, why string) (*LedgerEntry, error) {
	return decideOrder(h, id, "deny", why)
}

func decideOrder(h *bridge.Home, id, as, why string) (*LedgerEntry, error) {
	if h.Config.Role != "host" {
		return nil, errors.New("approvals are decided on the host")
	}
	e, err := snapshotEntry(h, id, ledger.StateAwaitingApproval)
	if err != nil {
		return nil, err
	}
	return e, writeOrder(h, controlOrder{ID: id, As: as, Why: why})
}

// Pending lists the requests awaiting approval, oldest first.
func Pending(h *bridge.Home) ([]LedgerEntry, error) {
	entries, err := LedgerEntries(h)
	if err != nil {
		return nil, err
	}
	var out []LedgerEntry
	for _, e := range entries {
		if e.State == ledger.StateAwaitingApproval {
			out = append(out, e)
		}
	}
	return out, nil
}
