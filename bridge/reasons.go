package bridge

// The reasons a receipt gives for how a request ended (SPEC §12): one
// vocabulary for the host that writes them and the agent, the CLI and the
// MCP server that read them, typed so that a bare string is never taken for
// one. The codes of refused files (malformed, bad-signature, ...) are
// Reason's, from the errors.
const (
	ReasonNotAllowed       ReasonCode = "not-allowed"       // rejected: the policy does not let this agent run this op
	ReasonBadArgument      ReasonCode = "bad-argument"      // rejected: an argument failed its type, pattern or range
	ReasonCeiling          ReasonCode = "ceiling"           // rejected: over one of the agent's ceilings
	ReasonIncomplete       ReasonCode = "incomplete"        // rejected: the payload did not arrive complete in time
	ReasonRevoked          ReasonCode = "revoked"           // rejected: signed by a revoked key, or the agent is no longer trusted
	ReasonKeyExpired       ReasonCode = "key-expired"       // rejected: signed by a key whose overlap ended
	ReasonHostError        ReasonCode = "host-error"        // failed: the host could not prepare the op
	ReasonStartFailed      ReasonCode = "start-failed"      // failed: the process could not be started
	ReasonHostShutdown     ReasonCode = "host-shutdown"     // failed before it started, or uncertain: stopped while it ran
	ReasonTimeout          ReasonCode = "timeout"           // done: the op ran out of its time
	ReasonCancelled        ReasonCode = "cancelled"         // cancelled: the agent cancelled it
	ReasonCrashed          ReasonCode = "crashed"           // uncertain: the host crashed while it ran
	ReasonRerunRefused     ReasonCode = "rerun-refused"     // uncertain: a rerun a human ordered could not start
	ReasonRecordLost       ReasonCode = "record-lost"       // uncertain: the ledger lost the record of a request it admitted
	ReasonReconciled       ReasonCode = "reconciled"        // done, failed: a human (or the reconcile command) settled it
	ReasonDenied           ReasonCode = "denied"            // rejected: a human denied it
	ReasonApprovalMismatch ReasonCode = "approval-mismatch" // rejected: what it would run changed since a human saw it
	ReasonPolicyChanged    ReasonCode = "policy-changed"    // rejected: the policy changed while it waited for a slot
	ReasonApprovalExpired  ReasonCode = "approval-expired"  // expired: nobody approved it in time
	ReasonPastExpiry       ReasonCode = "past-expiry"       // expired: its validity ended while it waited for approval
)

// ReasonCode is a receipt's reason (SPEC §12): a string on the wire.
type ReasonCode string

// ReceiptReasons are the reasons of SPEC §12's table besides the codes of
// refused files (FileReasons), in its order.
var ReceiptReasons = []ReasonCode{
	ReasonNotAllowed, ReasonBadArgument, ReasonCeiling, ReasonIncomplete, ReasonRevoked, ReasonKeyExpired,
	ReasonHostError, ReasonStartFailed, ReasonHostShutdown, ReasonTimeout, ReasonCancelled, ReasonCrashed,
	ReasonRerunRefused, ReasonRecordLost, ReasonReconciled, ReasonDenied, ReasonApprovalMismatch,
	ReasonPolicyChanged, ReasonApprovalExpired, ReasonPastExpiry,
}

// FileReasons are the codes Reason gives a refused file (SPEC §12's
// list), each once, in the order of its table.
func FileReasons() []ReasonCode {
	var out []ReasonCode
	seen := map[ReasonCode]bool{}
	for _, r := range reasons {
		if !seen[r.code] {
			seen[r.code] = true
			out = append(out, r.code)
		}
	}
	return out
}

// What an agent can tell of a request before its answer (the agent's
// State), besides the answer's status (Status*) once there is one.
const (
	StateSubmitted        = "submitted"         // sent; nothing from the host yet
	StateAwaitingApproval = "awaiting-approval" // the host holds it for a human (its notice says so)
	StateRunning          = "running"           // the host started it (a progress chunk came)
	StateRerunOrdered     = "rerun-ordered"     // a human ordered a rerun of an uncertain answer; another comes
)
