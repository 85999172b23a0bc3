package bridge

import (
	"fmt"
	"strings"
)

// HintWords are the words a front end uses for the steps a hint names: the
// command line's commands, or the MCP server's tools.
type HintWords struct {
	Ops   string // how to see what may run: "run `bridge ops`", "list the tools again"
	Again string // how to send a request anew: "send it again", "call it again"
	Retry string // how to retry an incomplete one: "run the command again", "call again with the same _key"
	// Settle is what follows an uncertain answer: who settles it and how
	// the agent learns the outcome (it names the request, so the caller
	// writes it).
	Settle string
}

// The one table of what an agent does next about an answer that is not a
// plain success, by status and reason (SPEC §12), for the command line and
// the MCP server alike (issue 28: their two tables had drifted). {ops},
// {again} and {retry} are the front end's words. First match wins; an
// empty reason matches any.
var nextSteps = []struct {
	status string
	reason ReasonCode
	text   string
}{
	{StatusFailed, ReasonReconciled, "a human on the host found it had no effect: a retry is safe"},
	{StatusFailed, "", "it never started, so a retry is safe once the host is fixed (the detail says what is missing)"},
	{"", ReasonDenied, "a human on the host refused it (the detail may say why); do not send it again unchanged"},
	{"", ReasonApprovalMismatch, "what it would run changed on the host after a human saw it, so it did not run; {again} to ask again"},
	{"", ReasonPolicyChanged, "the host's policy changed while it waited for its op, so it did not run; {ops} to see the new catalog, then {again}"},
	{"", ReasonApprovalExpired, "nobody on the host approved it in time; {again} when someone can (`bridge pending` on the host lists what waits)"},
	{StatusExpired, "", "it waited past its expiry and never ran: {again} (with a longer --ttl if the host is often away)"},
	{StatusCancelled, "", "cancelled as asked; an op stopped while running may have had part of its effect"},
	{"", ReasonRevoked, "the key that signed it is revoked on the host: this agent must be paired with the host again (docs/KEYS.md)"},
	{"", ReasonKeyExpired, "it was signed by a key of this agent whose overlap after a rotation has ended: {again} (this agent signs with its current key)"},
	{"", "not-yet-valid", "nothing ran: this machine's clock is ahead of the host's by more than the host allows (the detail says by how much); " +
		"do not change the call: set both clocks by NTP (`timedatectl set-ntp true`, or the system's time settings), then {again}"},
	{"", ReasonNotAllowed, "the host's policy does not let this agent run it; {ops} to see what it may run (the catalog may have changed), and ask the human if it is needed"},
	{"", ReasonBadArgument, "an argument broke the op's rule on the host (the detail names it); {ops} to see each argument's type and pattern, fix it and {again}"},
	{"", "too-large", "the standard input is over the op's limit (max_stdin: {ops} shows it); send less"},
	{"", ReasonIncomplete, "the payload never arrived complete; check the sync client, then {retry}"},
	{"", ReasonCeiling, "the host's policy caps this agent's runs; try again later (the detail names the ceiling)"},
	{"", "unknown-version", "the host does not read this request's format: it runs an older bridge than this agent; upgrade the host (`bridge version` on each side; docs/OPERATIONS.md, \"Upgrading\")"},
}

// NextStep is what an agent does next about rc, in w's words; "" for a
// plain success or an answer the table has nothing to say about.
func NextStep(rc *Receipt, w HintWords) string {
	if rc.Status == StatusUncertain {
		return "do not retry: it may have had its effect. " + w.Settle
	}
	for _, s := range nextSteps {
		if (s.status == "" || s.status == rc.Status) && (s.reason == "" || s.reason == rc.Reason) && (s.status != "" || s.reason != "") {
			return strings.NewReplacer("{ops}", w.Ops, "{again}", w.Again, "{retry}", w.Retry).Replace(s.text)
		}
	}
	return ""
}

// HintError carries a next step for the user along with the error.
type HintError struct {
	Err  error
	Hint string
}

func (e *HintError) Error() string { return e.Err.Error() }
func (e *HintError) Unwrap() error { return e.Err }

// WithHint wraps err with a next step for the user (hint, formatted with
// args).
func WithHint(err error, hint string, args ...any) error {
	return &HintError{Err: err, Hint: fmt.Sprintf(hint, args...)}
}
