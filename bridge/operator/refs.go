package operator

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/trust"
)

// Request references. Agents choose their request ids, so two agents can
// use one id (a bug, or one agent copying another's to get in the way of a
// decision). The ledger keys requests by agent and id; an operator names one
// as AGENT/ID, where AGENT is the agent's local name (as in the policy) or
// its whole id (never a prefix of it: a peer's name could be made to read
// as one), and ID the request id or a unique prefix of at least 8 of its
// digits. An id alone is enough when it names one request, or one in the
// state the command acts on.

// LedgerEntry is one request in the host's ledger.
type LedgerEntry = ledger.Entry

// ErrBadRef: what was given cannot name a request (a usage error).
var ErrBadRef = errors.New("not a request reference")

// minRefDigits is the shortest id prefix a reference may use.
const minRefDigits = 8

// Listed is a ledger entry with the reference an operator gives for it.
type Listed struct {
	Ref       string `json:"ref"`        // AGENT/ID, AGENT the agent's local name
	AgentName string `json:"agent_name"` // the agent's local name; its id if it is no longer trusted (agent is the id)
	// ExitCode is the op's exit code when it ran (the entry's Exit), under
	// the name the agent's `ls --json` and `run --json` give it; null when
	// it did not run, or a reconcile command settled it (its exit is the
	// check's, not the op's).
	ExitCode *int `json:"exit_code"`
	LedgerEntry
}

// List reads the host's ledger (a snapshot: a running daemon is not
// disturbed) with each entry's reference, oldest first.
func List(h *trust.Home) ([]Listed, error) {
	entries, err := LedgerEntries(h)
	if err != nil {
		return nil, err
	}
	names := AgentNames(h)
	out := make([]Listed, len(entries))
	for i, e := range entries {
		out[i] = listed(names, e)
	}
	// Oldest first, as they arrived.
	sort.SliceStable(out, func(i, j int) bool { return out[i].FirstSeen.Before(out[j].FirstSeen) })
	return out, nil
}

// LedgerEntries reads the host's ledger without disturbing a running daemon.
func LedgerEntries(h *trust.Home) ([]LedgerEntry, error) {
	entries, err := ledger.Snapshot(h.Path("ledger"))
	var le *ledger.Error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.As(err, &le) && le.Hint != "":
		return nil, bridge.WithHint(err, "%s", le.Hint)
	}
	return entries, err
}

// AgentNames maps the trusted agents' ids to their local names.
func AgentNames(h *trust.Home) map[string]string {
	names := map[string]string{}
	peers, _ := h.Peers()
	for _, p := range peers {
		if p.Role == "agent" {
			names[p.ID] = p.Name
		}
	}
	return names
}

// RefName is an entry's reference, AGENT/ID, with names from AgentNames.
func RefName(names map[string]string, e LedgerEntry) string {
	if n := names[e.Agent]; n != "" {
		return n + "/" + e.ID
	}
	return e.Agent + "/" + e.ID
}

func listed(names map[string]string, e LedgerEntry) Listed {
	name := names[e.Agent]
	if name == "" {
		name = e.Agent
	}
	l := Listed{Ref: RefName(names, e), AgentName: name, LedgerEntry: e}
	if e.State == ledger.StateDone && e.Exit != nil && e.Reason != string(bridge.ReasonReconciled) {
		l.ExitCode = e.Exit
	}
	return l
}

// ListedOf is one entry with its reference and agent name.
func ListedOf(h *trust.Home, e LedgerEntry) Listed { return listed(AgentNames(h), e) }

// refOf is the reference of one entry.
func refOf(h *trust.Home, e LedgerEntry) string { return RefName(AgentNames(h), e) }

// SnapshotEntry resolves ref in a snapshot of the ledger (beside a running
// daemon) and checks the entry is in state want.
func SnapshotEntry(h *trust.Home, ref string, want ledger.State) (*LedgerEntry, error) {
	entries, err := LedgerEntries(h)
	if err != nil {
		return nil, err
	}
	return ResolveRef(h, entries, ref, want)
}

// ResolveRef finds the entry ref names among entries, and checks that it
// is in state want.
func ResolveRef(h *trust.Home, entries []LedgerEntry, ref string, want ledger.State) (*LedgerEntry, error) {
	agentPart, idPart, scoped := strings.Cut(ref, "/")
	if !scoped {
		agentPart, idPart = "", ref
	}
	if len(idPart) < minRefDigits || len(idPart) > 32 || strings.Trim(idPart, "0123456789abcdef") != "" || (scoped && agentPart == "") {
		return nil, bridge.WithHint(fmt.Errorf("%w: %q", ErrBadRef, ref),
			"give the request id (32 hex digits, or a unique prefix of at least %d), or AGENT/ID as `bridge pending` and `bridge ls` show it", minRefDigits)
	}
	names := AgentNames(h)
	var found []LedgerEntry
	for _, e := range entries {
		if !strings.HasPrefix(e.ID, idPart) {
			continue
		}
		if scoped && names[e.Agent] != agentPart && e.Agent != agentPart {
			continue
		}
		found = append(found, e)
	}
	if len(found) > 1 {
		var inState []LedgerEntry
		for _, e := range found {
			if e.State == want {
				inState = append(inState, e)
			}
		}
		if len(inState) == 1 {
			found = inState
		}
	}
	switch len(found) {
	case 0:
		return nil, bridge.WithHint(fmt.Errorf("no request %s in the ledger", ref), "`bridge ls` on the host lists the ledger")
	case 1:
		e := &found[0]
		if e.State != want {
			err := fmt.Errorf("request %s is %s, not %s", RefName(names, *e), e.State, want)
			if hint := stateHint(h, *e, want); hint != "" {
				return nil, bridge.WithHint(err, "%s", hint)
			}
			return nil, err
		}
		return e, nil
	}
	var refs []string
	for _, e := range found {
		refs = append(refs, fmt.Sprintf("%s (%s)", RefName(names, e), e.State))
	}
	return nil, bridge.WithHint(fmt.Errorf("%s names %d requests: %s", ref, len(found), strings.Join(refs, ", ")),
		"name one as AGENT/ID")
}

// stateHint says what becomes of a request that is not yet in the state a
// command wants, when that is not plain.
func stateHint(h *trust.Home, e LedgerEntry, want ledger.State) string {
	if want != ledger.StateUncertain || (e.State != ledger.StateClaimed && e.State != ledger.StateRunning) {
		return ""
	}
	if pid, ok := DaemonRunning(h); ok && pid != os.Getpid() { // this process holds the home for a command
		return "it runs now (or waits for its op's slot): its result settles it, with no human needed"
	}
	if e.State == ledger.StateClaimed {
		return "bridge serve is not running; it starts this request when it starts"
	}
	return "bridge serve is not running, so this run was cut off; the next start of `bridge serve` settles it " +
		"(an idempotent op runs again, an op with a reconcile command is checked, any other is held uncertain for you to reconcile)"
}
