package ledger

// State is the lifecycle state of one request id in the ledger.
type State string

// The states of a request. See the package documentation for the allowed
// transitions between them.
const (
	// StateSeen: the signed manifest verified and the id is recorded.
	StateSeen State = "seen"
	// StatePending: waiting for the payload to arrive hash-complete.
	StatePending State = "pending"
	// StateAwaitingApproval: the policy requires a human to approve the op.
	StateAwaitingApproval State = "awaiting-approval"
	// StateClaimed: one worker owns the id; the operation has not started.
	StateClaimed State = "claimed"
	// StateRunning: execution was started (Runs was incremented).
	StateRunning State = "running"
	// StateDone: the operation finished and its result is published.
	StateDone State = "done"
	// StateFailed: the operation could not be run or finished with an error.
	StateFailed State = "failed"
	// StateRejected: refused before execution (signature, policy, forgery).
	StateRejected State = "rejected"
	// StateExpired: the request expired before it could run.
	StateExpired State = "expired"
	// StateCancelled: the agent or the operator cancelled the request.
	StateCancelled State = "cancelled"
	// StateUncertain: a crash interrupted a non-idempotent run; whether it
	// had an effect is unknown and a human must resolve it.
	StateUncertain State = "uncertain"
)

// states lists every state in lifecycle order; Stats reports in this order.
var states = []State{
	StateSeen, StatePending, StateAwaitingApproval, StateClaimed, StateRunning,
	StateDone, StateFailed, StateRejected, StateExpired, StateCancelled, StateUncertain,
}

// transitions is the whole state machine. Terminal states have no way out:
// a request id that reached one is never executed again (design invariant 4).
// uncertain → claimed exists only for an operator who decided to re-run.
// failed before a start is a request the host could not prepare (its
// program is missing); uncertain before a start is a ledger found behind a
// result the host sealed (a restored backup): both answer a request that
// was recorded and never started by this ledger.
var transitions = map[State][]State{
	StateSeen:             {StatePending, StateAwaitingApproval, StateClaimed, StateRejected, StateExpired, StateCancelled, StateFailed, StateUncertain},
	StatePending:          {StateAwaitingApproval, StateClaimed, StateRejected, StateExpired, StateCancelled, StateFailed, StateUncertain},
	StateAwaitingApproval: {StateClaimed, StateRejected, StateExpired, StateCancelled, StateFailed, StateUncertain},
	StateClaimed:          {StateRunning, StatePending, StateFailed, StateRejected, StateExpired, StateCancelled, StateUncertain},
	StateRunning:          {StateRunning, StateDone, StateFailed, StateCancelled, StateUncertain},
	StateUncertain:        {StateClaimed, StateDone, StateFailed, StateCancelled},
}

// admitStates are the states Admit accepts for a new entry. claimed and
// running are excluded on purpose: the only way to own an id is the
// compare-and-set in Transition. uncertain is a request new to this ledger
// that the host admitted before (its record was lost to a repair or a
// restored backup): it is held for a human, never run.
var admitStates = []State{
	StateSeen, StatePending, StateAwaitingApproval, StateRejected, StateExpired, StateCancelled, StateUncertain,
}

// CanAdmit reports whether Admit may create an entry in state s.
func CanAdmit(s State) bool { return contains(admitStates, s) }

// Valid reports whether s is one of the states defined above.
func (s State) Valid() bool {
	for _, v := range states {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether s is final: done, failed, rejected, expired or
// cancelled. Only terminal entries are ever garbage-collected.
func (s State) Terminal() bool {
	switch s {
	case StateDone, StateFailed, StateRejected, StateExpired, StateCancelled:
		return true
	}
	return false
}

// Answered reports whether an entry in state s has its answer: a final
// state, or uncertain (which only a human moves on).
func (s State) Answered() bool { return s.Terminal() || s == StateUncertain }

// InFlight reports whether s is claimed or running: an entry a crash may have
// interrupted, which start-up recovery must look at.
func (s State) InFlight() bool {
	return s == StateClaimed || s == StateRunning
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

func contains(list []State, s State) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
