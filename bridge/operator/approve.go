package operator

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Approve and Deny hand a human's decision to the daemon (it applies it
// within a second, or at its next start). ref names the request: its id,
// or AGENT/ID (see ResolveRef). Approving a request whose signing key has
// been revoked is refused at once: the daemon answers it rejected.
func Approve(h *trust.Home, ref string) (*Decision, error) {
	return decideOrder(h, ref, "approve", "", false)
}

// ApproveDespiteInput is Approve when what `bridge pending` shows of the
// request's input is not the input the approval is bound to (the kept copy
// is missing or changed, or the approval text is not as the host writes
// it): the human says they approve the hash they were shown anyway.
// Approve refuses that.
func ApproveDespiteInput(h *trust.Home, ref string) (*Decision, error) {
	return decideOrder(h, ref, "approve", "", true)
}

// ErrInputNotShown: Approve refused, as the input shown is not the one the
// approval is bound to.
var ErrInputNotShown = errors.New("the input shown is not the one the approval is bound to")

// Deny refuses a request awaiting approval; why is passed to the agent.
func Deny(h *trust.Home, ref, why string) (*Decision, error) {
	return decideOrder(h, ref, "deny", why, false)
}

// Decision is what approve, deny or reconcile did with a request.
type Decision struct {
	Listed      // the request, as the ledger had it
	Queued bool `json:"queued"` // handed to the running daemon (or its next start), which applies it within a second
}

func decideOrder(h *trust.Home, ref, as, why string, despiteInput bool) (*Decision, error) {
	if err := HostOnly(h, as); err != nil {
		return nil, err
	}
	e, err := SnapshotEntry(h, ref, ledger.StateAwaitingApproval)
	if err != nil {
		return nil, err
	}
	if as == "approve" {
		if err := revokedSigner(h, *e); err != nil {
			return nil, bridge.WithHint(fmt.Errorf("approve %s: %w", refOf(h, *e), err),
				"nothing signed by a revoked key runs; the daemon answers it rejected (revoked)")
		}
		// Refused before the order is written: the daemon applies one
		// within a second, too soon for a deny to catch up.
		if in := ReadApprovalInput(h, ListedOf(h, *e)); in != nil && in.Problem != "" && !despiteInput {
			return nil, bridge.WithHint(fmt.Errorf("approve %s: %w: %s", refOf(h, *e), ErrInputNotShown, in.Problem),
				"`bridge deny %s` it; or, to approve the input whose SHA-256 is %s all the same, `bridge approve --despite-input %s`",
				refOf(h, *e), in.SHA256, refOf(h, *e))
		}
	}
	if err := WriteOrder(h, Order{Key: e.Key, As: as, Why: why}); err != nil {
		return nil, err
	}
	return &Decision{Listed: ListedOf(h, *e), Queued: true}, nil
}

// revokedSigner reports, from the home alone (the daemon may not run), that
// the key that signed an entry's request is revoked or its agent no longer
// trusted.
func revokedSigner(h *trust.Home, e LedgerEntry) error {
	p, err := h.PeerByID(e.Agent)
	if err != nil {
		return fmt.Errorf("%w: its agent is no longer trusted", bridge.ErrKeyRevoked)
	}
	data := e.Manifest // the ledger's copy; the home's is not fsynced
	if data == nil {
		var err error
		data, err = os.ReadFile(KeptManifestPath(h, e.Agent, e.ID, bridge.ExtManifest))
		if errors.Is(err, fs.ErrNotExist) {
			data, err = os.ReadFile(KeptManifestPath(h, e.Agent, e.ID, ExtUnrecorded))
		}
		if err != nil {
			return nil // the daemon cannot approve it either; it says why
		}
	}
	for _, k := range p.Keys {
		var req bridge.Request
		if bridge.OpenBody(bcrypto.KindRequest, data, [][]byte{k.SignPub}, &req) == nil && p.State(k, time.Now()) == trust.KeyRevoked {
			return fmt.Errorf("it was signed by key %s of %s, which is revoked on this host", k.SignKid(), p.Name)
		}
	}
	return nil
}

// Pending lists the requests awaiting approval, oldest first.
func Pending(h *trust.Home) ([]Waiting, error) {
	if err := HostOnly(h, "pending"); err != nil {
		return nil, err
	}
	all, err := List(h)
	if err != nil {
		return nil, err
	}
	out := []Waiting{}
	for _, e := range all {
		if e.State == ledger.StateAwaitingApproval {
			out = append(out, Waiting{Listed: e, Input: ReadApprovalInput(h, e)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Updated.Before(out[j].Updated) })
	return out, nil
}

// Waiting is a request that waits for approval, with what the human is
// shown of its input (nil: the op reads none, or it carried none).
type Waiting struct {
	Listed
	Input *ApprovalInput `json:"input,omitempty"`
}

// PendingInput writes to w the whole input of the request ref that waits
// for approval, once the kept copy is checked against the SHA-256 the
// approval is bound to.
func PendingInput(h *trust.Home, ref string, w io.Writer) (*Waiting, error) {
	if err := HostOnly(h, "pending"); err != nil {
		return nil, err
	}
	e, err := SnapshotEntry(h, ref, ledger.StateAwaitingApproval)
	if err != nil {
		return nil, err
	}
	l := ListedOf(h, *e)
	if e.State != ledger.StateAwaitingApproval {
		return nil, fmt.Errorf("request %s is %s: it does not wait for approval, and its input is not kept", l.Ref, e.State)
	}
	in, f := OpenApprovalInput(h, l)
	switch {
	case in == nil:
		return nil, fmt.Errorf("request %s carries no standard input", l.Ref)
	case f == nil:
		return nil, fmt.Errorf("request %s: %s", l.Ref, in.Problem)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return nil, err
	}
	return &Waiting{Listed: l, Input: in}, nil
}

// KeptManifestPath is where the daemon keeps the admitted manifest of
// agent's request id: manifests/AGENT/ID.manifest once the ledger recorded
// the id (evidence of admission), ID.unrecorded (ExtUnrecorded) just
// before.
func KeptManifestPath(h *trust.Home, agent, id, ext string) string {
	return h.Path("manifests", agent, id+"."+ext)
}

// ExtUnrecorded names a kept manifest about to be recorded.
const ExtUnrecorded = "unrecorded"
