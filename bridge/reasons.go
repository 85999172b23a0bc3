package bridge

// The reasons a receipt gives for how a request ended (SPEC §12): one
// vocabulary for the host that writes them and the agent, the CLI and the
// MCP server that read them. They are untyped constants, so they go where
// a receipt's reason (a string on the wire) goes. The codes of refused
// files (malformed, bad-signature, ...) are Reason's, from the errors.
const (
	ReasonNotAllowed       = "not-allowed"       // rejected: the policy does not let this agent run this op
	ReasonBadArgument      = "bad-argument"      // rejected: an argument failed its type, pattern or range
	ReasonCeiling          = "ceiling"           // rejected: over one of the agent's ceilings
	ReasonIncomplete       = "incomplete"        // rejected: the payload did not arrive complete in time
	ReasonRevoked          = "revoked"           // rejected: signed by a revoked key, or the agent is no longer trusted
	ReasonKeyExpired       = "key-expired"       // rejected: signed by a key whose overlap ended
	ReasonHostError        = "host-error"        // failed: the host could not prepare the op
	ReasonStartFailed      = "start-failed"      // failed: the process could not be started
	ReasonHostShutdown     = "host-shutdown"     // failed before it started, or uncertain: stopped while it ran
	ReasonTimeout          = "timeout"           // done: the op ran out of its time
	ReasonCancelled        = "cancelled"         // cancelled: the agent cancelled it
	ReasonCrashed          = "crashed"           // uncertain: the host crashed while it ran
	ReasonRerunRefused     = "rerun-refused"     // uncertain: a rerun a human ordered could not start
	ReasonRecordLost       = "record-lost"       // uncertain: the ledger lost the record of a request it admitted
	ReasonReconciled       = "reconciled"        // done, failed: a human (or the reconcile command) settled it
	ReasonDenied           = "denied"            // rejected: a human denied it
	ReasonApprovalMismatch = "approval-mismatch" // rejected: what it would run changed since a human saw it
	ReasonPolicyChanged    = "policy-changed"    // rejected: the policy changed while it waited for a slot
	ReasonApprovalExpired  = "approval-expired"  // expired: nobody approved it in time
	ReasonPastExpiry       = "past-expiry"       // expired: its validity ended while it waited for approval
)

// ReceiptReasons are the reasons of SPEC §12's table besides the codes of
// refused files (FileReasons), in its order.
var ReceiptReasons = []string{
	ReasonNotAllowed, ReasonBadArgument, ReasonCeiling, ReasonIncomplete, ReasonRevoked, ReasonKeyExpired,
	ReasonHostError, ReasonStartFailed, ReasonHostShutdown, ReasonTimeout, ReasonCancelled, ReasonCrashed,
	ReasonRerunRefused, ReasonRecordLost, ReasonReconciled, ReasonDenied, ReasonApprovalMismatch,
	ReasonPolicyChanged, ReasonApprovalExpired, ReasonPastExpiry,
}

// FileReasons are the codes Reason gives a refused file (SPEC §12's
// list), each once, in the order of its table.
func FileReasons() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range reasons {
		if !seen[r.code] {
			seen[r.code] = true
			out = append(out, r.code)
		}
	}
	return out
}
